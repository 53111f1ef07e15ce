//! End to end with kube-rs: `kube::Api<Flunder>` against the wardle server over TLS, and raw
//! requests with bad input that must get kube-apiserver's `Status` and change nothing; on each
//! storage backend.

use crate::common::*;

backend_tests! {
    all: [
        typed_client_round_trip,
        finalizers_hold_deletion,
        bad_input_gets_status_and_changes_nothing,
        both_versions_read_one_flunder_and_lose_nothing,
    ],
}

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use wardle::{Fischer, Flunder};

async fn typed_client_round_trip(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");

    let created = api
        .create(&PostParams::default(), &flunder("k", "one"))
        .await
        .unwrap();
    assert_eq!(created.spec.reference_type.as_deref(), Some("Flunder"));
    assert!(created.metadata.uid.is_some());
    assert_eq!(created.metadata.generation, Some(1));

    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);

    let watch_from = list.metadata.resource_version.clone().unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(10), &watch_from)
        .await
        .unwrap()
        .boxed();

    let mut changed = created.clone();
    changed.spec.reference = Some("two".into());
    let replaced = api
        .replace("k", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.generation, Some(2));

    // The same stale object again: a conflict, and nothing changes.
    let mut stale = changed.clone();
    stale.spec.reference = Some("three".into());
    let err = api
        .replace("k", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        api.get("k").await.unwrap().spec.reference.as_deref(),
        Some("two")
    );

    let patch = serde_json::json!({"spec": {"reference": "patched"}});
    let patched = api
        .patch("k", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(patched.spec.reference.as_deref(), Some("patched"));

    let event = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap()
        .unwrap();
    match event {
        Some(WatchEvent::Modified(f)) => assert_eq!(f.spec.reference.as_deref(), Some("two")),
        other => panic!("expected MODIFIED, got {other:?}"),
    }

    let fischers: Api<Fischer> = Api::all(client);
    let mut fischer = Fischer::default();
    fischer.metadata.name = Some("fish".into());
    fischer.disallowed_flunders = vec!["bad".into()];
    fischers
        .create(&PostParams::default(), &fischer)
        .await
        .unwrap();
    assert_eq!(
        fischers
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    api.delete("k", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("k").await.unwrap().is_none());
    server.stop().await;
}

async fn finalizers_hold_deletion(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let api: Api<Flunder> = Api::namespaced(client(&server).await, "default");
    let mut f = flunder("fin", "x");
    f.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &f).await.unwrap();
    api.delete("fin", &DeleteParams::default()).await.unwrap();
    let held = api.get("fin").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    let patch = serde_json::json!({"metadata": {"finalizers": null}});
    api.patch("fin", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert!(api.get_opt("fin").await.unwrap().is_none());
    server.stop().await;
}

/// Sends a raw request and returns (code, parsed body).
async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, serde_json::Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body)
        .unwrap();
    match client.request_text(request).await {
        Ok(text) => (
            200,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        ),
        Err(kube::Error::Api(s)) => (
            s.code,
            serde_json::json!({"reason": s.reason, "message": s.message}),
        ),
        Err(e) => panic!("request failed: {e:?}"),
    }
}

async fn bad_input_gets_status_and_changes_nothing(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
    let kept = api
        .create(&PostParams::default(), &flunder("keep", "one"))
        .await
        .unwrap();
    let kept_rv = kept.metadata.resource_version.clone().unwrap();
    // Any other resourceVersion is stale. (Not a fixed number: on etcd, revisions are shared
    // with every other test, so a fixed one could be this object's.)
    let stale_rv = if kept_rv == "1" { "2" } else { "1" };
    let stale_patch = format!(r#"{{"metadata":{{"resourceVersion":"{stale_rv}"}}}}"#);

    let coll = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";
    let one = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders/keep";
    let json = "application/json";
    type Case<'a> = (&'a str, String, &'a str, Vec<u8>, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("POST", coll.to_string(), json, b"{not json".to_vec(), 400, "BadRequest"),
        ("POST", coll.to_string(), "application/yaml", b"a: [".to_vec(), 400, "BadRequest"),
        ("POST", coll.to_string(), json, br#"{"apiVersion":"v1","kind":"Flunder","metadata":{"name":"x"}}"#.to_vec(), 400, "BadRequest"),
        ("POST", coll.to_string(), json, br#"{"apiVersion":"wardle.example.com/v1alpha1","kind":"Fischer","metadata":{"name":"x"}}"#.to_vec(), 400, "BadRequest"),
        ("POST", coll.to_string(), json, br#"{"metadata":{"name":"Not_A_Name"}}"#.to_vec(), 422, "Invalid"),
        ("POST", coll.to_string(), json, br#"{"metadata":{"name":"x","namespace":"other"}}"#.to_vec(), 400, "BadRequest"),
        ("POST", coll.to_string(), json, br#"{"metadata":{"name":"x"},"spec":{"referenceType":"Bogus","reference":"r"}}"#.to_vec(), 422, "Invalid"),
        ("POST", coll.to_string(), json, br#"{"metadata":{"name":"keep"}}"#.to_vec(), 409, "AlreadyExists"),
        ("POST", coll.to_string(), "application/vnd.kubernetes.protobuf", b"\x00".to_vec(), 415, "UnsupportedMediaType"),
        // An unknown parameter is ignored (kube-apiserver does): the invalid name still fails.
        ("POST", format!("{coll}?bogus=1"), json, br#"{"metadata":{"name":"Not_A_Name"}}"#.to_vec(), 422, "Invalid"),
        ("POST", format!("{coll}?fieldValidation=Strict"), json, br#"{"metadata":{"name":"x"},"spec":{"nope":1}}"#.to_vec(), 400, "BadRequest"),
        ("PATCH", one.to_string(), "text/plain", b"{}".to_vec(), 415, "UnsupportedMediaType"),
        ("PATCH", one.to_string(), "application/json-patch+json", br#"[{"op":"test","path":"/spec/reference","value":"zzz"}]"#.to_vec(), 422, "Invalid"),
        ("PATCH", one.to_string(), "application/merge-patch+json", stale_patch.into_bytes(), 409, "Conflict"),
        ("PUT", one.to_string(), json, br#"{"metadata":{"name":"other"}}"#.to_vec(), 400, "BadRequest"),
        ("GET", format!("{coll}?limit=abc"), json, Vec::new(), 400, "BadRequest"),
        ("GET", format!("{coll}?fieldSelector=spec.nope%3Dx"), json, Vec::new(), 400, "BadRequest"),
        ("GET", format!("{coll}?continue=garbage"), json, Vec::new(), 400, "BadRequest"),
    ];
    for (method, path, content_type, body, code, reason) in cases {
        let (got, status) = raw(&client, method, &path, content_type, body).await;
        assert_eq!(
            (got, status["reason"].as_str().unwrap_or_default()),
            (code, reason),
            "{method} {path}: {status}"
        );
    }
    let huge = vec![b' '; 3 * 1024 * 1024 + 10];
    let (got, _) = raw(&client, "POST", coll, json, huge).await;
    assert_eq!(got, 413);

    // Nothing was created and the one object is unchanged. (The list's own resourceVersion
    // would say more on a store of this test's alone, but on etcd other tests move it.)
    let after = api.list(&ListParams::default()).await.unwrap();
    let after: Vec<_> = after
        .items
        .iter()
        .map(|f| (f.metadata.name.clone(), f.metadata.resource_version.clone()))
        .collect();
    assert_eq!(
        after,
        [(Some("keep".to_string()), Some(kept_rv))],
        "bad input changed storage"
    );
    server.stop().await;
}

/// sample-apiserver's two versions of a flunder over one storage: kube-rs `Api`s of v1alpha1
/// and v1beta1 on the same objects, sample-apiserver's conversion, nothing lost either way.
async fn both_versions_read_one_flunder_and_lose_nothing(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let alpha: Api<Flunder> = Api::namespaced(client.clone(), "default");
    let beta: Api<wardle::v1beta1::Flunder> = Api::namespaced(client.clone(), "default");

    // Created in v1alpha1 (its reference type defaulted): read in v1beta1.
    alpha
        .create(&PostParams::default(), &flunder("a", "other"))
        .await
        .unwrap();
    let in_beta = beta.get("a").await.unwrap();
    assert_eq!(in_beta.spec.flunder_reference.as_deref(), Some("other"));
    assert_eq!(in_beta.spec.fischer_reference, None);
    assert_eq!(in_beta.spec.reference_type.as_deref(), Some("Flunder"));

    // Created in v1beta1 with a fischer: read in v1alpha1, then changed there and read back.
    let fish = wardle::v1beta1::Flunder {
        metadata: kube::api::ObjectMeta {
            name: Some("b".into()),
            ..Default::default()
        },
        spec: wardle::v1beta1::FlunderSpec {
            fischer_reference: Some("fish".into()),
            reference_type: Some("Fischer".into()),
            ..Default::default()
        },
        status: None,
    };
    let created = beta.create(&PostParams::default(), &fish).await.unwrap();
    let in_alpha = alpha.get("b").await.unwrap();
    assert_eq!(in_alpha.spec.reference.as_deref(), Some("fish"));
    assert_eq!(in_alpha.spec.reference_type.as_deref(), Some("Fischer"));
    assert_eq!(
        in_alpha.metadata.resource_version,
        created.metadata.resource_version
    );
    let patch = serde_json::json!({"spec": {"reference": "trout"}});
    alpha
        .patch("b", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let back = beta.get("b").await.unwrap();
    assert_eq!(back.spec.fischer_reference.as_deref(), Some("trout"));
    assert_eq!(back.spec.flunder_reference, None);
    assert_eq!(back.metadata.annotations, None, "nothing left behind");

    // sample-apiserver's validation of v1beta1: both references at once is invalid.
    let mut both = fish.clone();
    both.metadata.name = Some("c".into());
    both.spec.flunder_reference = Some("x".into());
    let refused = beta
        .create(&PostParams::default(), &both)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("a Status: {refused}");
    };
    assert_eq!(status.code, 422, "{status:?}");

    // One list, the same objects at the same revision in both versions.
    let (list_a, list_b) = (
        alpha.list(&ListParams::default()).await.unwrap(),
        beta.list(&ListParams::default()).await.unwrap(),
    );
    assert_eq!(list_a.items.len(), 2);
    assert_eq!(list_b.items.len(), 2);
    assert_eq!(
        list_a.metadata.resource_version,
        list_b.metadata.resource_version
    );
    server.stop().await;
}
