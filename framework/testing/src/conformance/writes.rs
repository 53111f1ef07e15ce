//! Writes: resourceVersion, optimistic concurrency, generateName, finalizers, dry run — as
//! the generic registry Store of `k8s.io/apiserver` does them.

use kube::core::WatchEvent;
use serde_json::{Value, json};

use extension_apiserver::runtime::Resource;

use super::Outcome;
use super::client::{
    Ctx, describe, ensure, expect_status, names, resource_version, within_seconds,
};

const LABEL: &str = "conformance.example.com/step";
const FINALIZER: &str = "conformance.example.com/hold";

/// `object` with label [`LABEL`] set to `value`: a change every resource accepts.
fn relabeled(object: &Value, value: &str) -> Value {
    let mut object = object.clone();
    object["metadata"]["labels"][LABEL] = json!(value);
    object
}

pub(super) async fn resource_versions<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let created = ctx.create_sample("rv", &[]).await?;
    let rv1 = resource_version(&created);
    ensure!(
        !rv1.is_empty(),
        "a created object needs a resourceVersion: {created}"
    );
    let got = ctx.get(&ctx.item("rv")).await?.expect(200, "GET")?;
    ensure!(
        resource_version(&got) == rv1,
        "GET after create: resourceVersion {:?}, the create returned {rv1:?}",
        resource_version(&got)
    );
    let updated = ctx.update(&relabeled(&got, "1")).await?;
    let rv2 = resource_version(&updated);
    ensure!(
        rv2 != rv1 && !rv2.is_empty(),
        "an update must change the resourceVersion ({rv1:?} -> {rv2:?})"
    );
    // kube-apiserver writes nothing when an update changes nothing: the version stays.
    let same = ctx.update(&updated).await?;
    ensure!(
        resource_version(&same) == rv2,
        "an update that changes nothing must keep resourceVersion {rv2:?} (kube-apiserver does not write), got {:?}",
        resource_version(&same)
    );
    let mut seen = vec![rv1, rv2.clone()];
    for name in ["rv-b", "rv-c"] {
        seen.push(resource_version(&ctx.create_sample(name, &[]).await?));
    }
    let mut distinct = seen.clone();
    distinct.sort();
    distinct.dedup();
    ensure!(
        distinct.len() == seen.len(),
        "every write needs a resourceVersion of its own: {seen:?}"
    );
    list_is_not_older_than_items(ctx, &updated).await
}

/// A list's resourceVersion is at least as new as its items: a watch from it sees the next
/// write first, not its items again.
async fn list_is_not_older_than_items<K: Resource>(ctx: &Ctx<'_, K>, object: &Value) -> Outcome {
    let list = ctx.list("").await?;
    let list_rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        !list_rv.is_empty(),
        "a list needs metadata.resourceVersion: {list}"
    );
    for item in list["items"].as_array().into_iter().flatten() {
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let got = ctx.get(&ctx.item(name)).await?.expect(200, "GET")?;
        ensure!(
            resource_version(item) == resource_version(&got),
            "a list item and a GET disagree on {name:?}'s resourceVersion"
        );
    }
    let mut watch = ctx
        .watch(&format!("resourceVersion={list_rv}&timeoutSeconds=10"))
        .await?;
    let current = ctx
        .get(&ctx.item(&name_of(object)))
        .await?
        .expect(200, "GET")?;
    let written = ctx.update(&relabeled(&current, "2")).await?;
    match watch.next(10).await? {
        Some(WatchEvent::Modified(o)) if resource_version(&o) == resource_version(&written) => {
            Ok(())
        }
        other => Err(format!(
            "a watch from the list's resourceVersion {list_rv:?} must start after its items: expected MODIFIED {:?} at {:?}, got {:?}",
            name_of(object),
            resource_version(&written),
            other.as_ref().map(describe)
        )),
    }
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

pub(super) async fn stale_update_conflict<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let info = ctx.info();
    let details = Some(("stale", info.group, info.plural));
    let old = ctx.create_sample("stale", &[]).await?;
    let current = ctx.update(&relabeled(&old, "current")).await?;
    let reply = ctx
        .put(&ctx.item("stale"), &relabeled(&old, "stale"))
        .await?;
    expect_status(&reply, 409, "Conflict", details)
        .map_err(|e| format!("PUT with a stale resourceVersion: {e}"))?;
    let patch = json!({"metadata": {"resourceVersion": resource_version(&old), "labels": {LABEL: "patched"}}});
    let reply = ctx.merge_patch(&ctx.item("stale"), &patch).await?;
    expect_status(&reply, 409, "Conflict", details)
        .map_err(|e| format!("PATCH with a stale resourceVersion: {e}"))?;
    let options = json!({"kind": "DeleteOptions", "apiVersion": "v1",
        "preconditions": {"resourceVersion": resource_version(&old)}});
    let reply = ctx.delete(&ctx.item("stale"), Some(&options)).await?;
    // rest.BeforeDelete checks the precondition first and names the Kind, not the resource.
    let delete_details = Some(("stale", info.group, info.kind));
    expect_status(&reply, 409, "Conflict", delete_details)
        .map_err(|e| format!("DELETE with a stale resourceVersion precondition: {e}"))?;
    let stored = ctx
        .get(&ctx.item("stale"))
        .await?
        .expect(200, "GET after the conflicts")?;
    ensure!(
        resource_version(&stored) == resource_version(&current)
            && stored["metadata"]["labels"][LABEL] == "current",
        "a conflicting write changed the object: {stored}"
    );
    Ok(())
}

pub(super) async fn generate_name<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let prefix = "conformance-";
    let mut made = Vec::new();
    for _ in 0..2 {
        let mut object = ctx.object("unused", ctx.ns());
        object["metadata"].as_object_mut().map(|m| m.remove("name"));
        object["metadata"]["generateName"] = json!(prefix);
        let created = ctx.create(&object).await?;
        let name = name_of(&created);
        // names.SimpleNameGenerator: the prefix and 5 random characters.
        ensure!(
            name.starts_with(prefix) && name.len() == prefix.len() + 5,
            "generateName {prefix:?} must give the prefix and 5 random characters, got {name:?}"
        );
        ctx.get(&ctx.item(&name))
            .await?
            .expect(200, &format!("GET of the generated {name:?}"))?;
        made.push(name);
    }
    ensure!(
        made[0] != made[1],
        "two creates with generateName got the same name {:?}",
        made[0]
    );
    let mut object = ctx.object("given", ctx.ns());
    object["metadata"]["generateName"] = json!(prefix);
    let created = ctx.create(&object).await?;
    ensure!(
        name_of(&created) == "given",
        "a given name wins over generateName, got {:?}",
        name_of(&created)
    );
    Ok(())
}

pub(super) async fn finalizers<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let mut object = ctx.object("held", ctx.ns());
    object["metadata"]["finalizers"] = json!([FINALIZER]);
    ctx.create(&object).await?;
    let uri = ctx.item("held");
    held_by_finalizers(ctx, &uri).await?;
    let mut released = ctx.get(&uri).await?.expect(200, "GET")?;
    released["metadata"]["finalizers"] = json!([]);
    ctx.update(&released).await?;
    let gone =
        within_seconds(|| async { matches!(ctx.get(&uri).await, Ok(r) if r.code == 404) }).await;
    ensure!(
        gone,
        "removing the last finalizer of a deleted object must delete it"
    );
    Ok(())
}

/// DELETE of the object at `uri`, which has [`FINALIZER`]: it stays, being deleted, and
/// takes no new finalizer; a second DELETE changes nothing.
async fn held_by_finalizers<K: Resource>(ctx: &Ctx<'_, K>, uri: &str) -> Outcome {
    let info = ctx.info();
    let reply = ctx.delete(uri, None).await?;
    let deleted = reply.expect(
        200,
        "DELETE of an object with finalizers (kube-apiserver answers 200 with the object)",
    )?;
    ensure!(
        deleted["metadata"]["deletionTimestamp"].is_string(),
        "DELETE of an object with finalizers answers the object with deletionTimestamp, got {deleted}"
    );
    let held = ctx
        .get(uri)
        .await?
        .expect(200, "GET while finalizers hold the object")?;
    ensure!(
        held["metadata"]["deletionTimestamp"].is_string()
            && held["metadata"]["finalizers"] == json!([FINALIZER]),
        "the object stays with deletionTimestamp and its finalizers: {held}"
    );
    ensure!(
        held["metadata"]["deletionGracePeriodSeconds"] == 0,
        "deletionGracePeriodSeconds is 0 for an object without grace, got {held}"
    );
    let mut more = held.clone();
    more["metadata"]["finalizers"] = json!([FINALIZER, "conformance.example.com/another"]);
    let reply = ctx.put(uri, &more).await?;
    expect_status(
        &reply,
        422,
        "Invalid",
        Some(("held", info.group, info.kind)),
    )
    .map_err(|e| format!("adding a finalizer to an object being deleted: {e}"))?;
    let again = ctx.delete(uri, None).await?;
    ensure!(
        again.code == 200 || again.code == 202,
        "a second DELETE of an object being deleted answers 200 or 202, got {} {}",
        again.code,
        again.body
    );
    ctx.get(uri)
        .await?
        .expect(200, "GET after a second DELETE: finalizers still hold it")?;
    Ok(())
}

pub(super) async fn dry_run<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    dry_run_create(ctx).await?;
    let stored = ctx.create_sample("kept", &[]).await?;
    dry_run_writes(ctx, &stored).await?;
    ensure!(
        names(&ctx.list("").await?) == ["kept"],
        "dry runs stored objects"
    );
    Ok(())
}

/// `POST ?dryRun=All` answers 201 and stores nothing; `dryRun=Some` is refused.
async fn dry_run_create<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let collection = ctx.collection(ctx.ns());
    let object = ctx.object("dry", ctx.ns());
    let reply = ctx
        .post(&format!("{collection}?dryRun=All"), &object)
        .await?;
    let answered = reply.expect(201, "POST ?dryRun=All")?;
    ensure!(
        name_of(&answered) == "dry",
        "a dry-run create answers the object it would create, got {answered}"
    );
    let reply = ctx.get(&ctx.item("dry")).await?;
    ensure!(
        reply.code == 404,
        "a dry-run create stored the object: {}",
        reply.body
    );
    // ValidateCreateOptions: anything but All is 422 Invalid on CreateOptions.
    let reply = ctx
        .post(
            &format!("{collection}?dryRun=Some"),
            &ctx.object("dry2", ctx.ns()),
        )
        .await?;
    expect_status(
        &reply,
        422,
        "Invalid",
        Some(("", "meta.k8s.io", "CreateOptions")),
    )
    .map_err(|e| format!("dryRun=Some: {e}"))
}

/// Dry-run PUT, PATCH and DELETE of `stored` answer as the write would and change nothing.
async fn dry_run_writes<K: Resource>(ctx: &Ctx<'_, K>, stored: &Value) -> Outcome {
    let uri = ctx.item(&name_of(stored));
    let reply = ctx
        .put(&format!("{uri}?dryRun=All"), &relabeled(stored, "dry"))
        .await?;
    let answered = reply.expect(200, "PUT ?dryRun=All")?;
    ensure!(
        answered["metadata"]["labels"][LABEL] == "dry",
        "a dry-run update answers the updated object, got {answered}"
    );
    let patch = json!({"metadata": {"labels": {LABEL: "dry-patch"}}});
    let reply = ctx
        .call(
            http::Method::PATCH,
            &format!("{uri}?dryRun=All"),
            Some(&patch),
            "application/merge-patch+json",
            None,
        )
        .await?;
    reply.expect(200, "PATCH ?dryRun=All")?;
    let reply = ctx.delete(&format!("{uri}?dryRun=All"), None).await?;
    ensure!(
        reply.code == 200 || reply.code == 202,
        "DELETE ?dryRun=All: expected 200, got {} {}",
        reply.code,
        reply.body
    );
    let now = ctx
        .get(&uri)
        .await?
        .expect(200, "GET after dry-run writes")?;
    ensure!(
        resource_version(&now) == resource_version(stored)
            && now["metadata"]["labels"][LABEL].is_null(),
        "dry-run writes changed the stored object: {now}"
    );
    Ok(())
}
