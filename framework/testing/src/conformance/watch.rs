//! Watch: events in the order of the writes, from a resourceVersion, and bookmarks (the
//! cacher's: the end of `sendInitialEvents`, and progress a watcher can resume from).

use kube::core::WatchEvent;
use serde_json::Value;

use extension_apiserver::runtime::Resource;

use super::Outcome;
use super::client::{Ctx, Events, OTHER_NAMESPACE, describe, ensure, resource_version};

type Seen = (String, String, String);

fn seen(kind: &str, name: &str, rv: &str) -> Seen {
    (kind.to_string(), name.to_string(), rv.to_string())
}

/// Takes `n` events (each within 10 s).
async fn take(events: &mut Events, n: usize) -> Result<Vec<Seen>, String> {
    let mut out = Vec::new();
    for _ in 0..n {
        match events.next(10).await {
            Ok(Some(event)) => out.push(describe(&event)),
            Ok(None) => return Err(format!("the watch ended after {out:?}")),
            Err(e) => return Err(format!("{e} after {out:?}")),
        }
    }
    Ok(out)
}

pub(super) async fn watch_order<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let start = ctx.list("").await?;
    let start = start["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut from_start = ctx
        .watch(&format!("resourceVersion={start}&timeoutSeconds=30"))
        .await?;
    let a = ctx.create_sample("wa", &[]).await?;
    if ctx.namespaced() {
        // Another namespace's object: not in this namespace's watch.
        ctx.create(&ctx.object("wa", Some(OTHER_NAMESPACE))).await?;
    }
    let mut changed = a.clone();
    changed["metadata"]["labels"]["conformance.example.com/step"] = Value::from("1");
    let a2 = ctx.update(&changed).await?;
    let b = ctx.create_sample("wb", &[]).await?;
    ctx.delete(&ctx.item("wa"), None)
        .await?
        .expect(200, "DELETE wa")?;
    let expected = [
        seen("ADDED", "wa", &resource_version(&a)),
        seen("MODIFIED", "wa", &resource_version(&a2)),
        seen("ADDED", "wb", &resource_version(&b)),
    ];
    let got = take(&mut from_start, 4).await?;
    ensure!(
        got[..3] == expected && got[3].0 == "DELETED" && got[3].1 == "wa",
        "a watch from {start:?} must send the writes in order with their resourceVersions: {expected:?} then DELETED wa, got {got:?}"
    );
    let deleted_rv = got[3].2.clone();
    ensure!(
        ![&expected[0].2, &expected[1].2, &expected[2].2].contains(&&deleted_rv),
        "a DELETED event carries the delete's own resourceVersion, got {deleted_rv:?} again"
    );
    // From the middle: only what came after.
    let mut from_middle = ctx
        .watch(&format!(
            "resourceVersion={}&timeoutSeconds=30",
            resource_version(&a2)
        ))
        .await?;
    let got = take(&mut from_middle, 2).await?;
    ensure!(
        got[0] == expected[2] && got[1].0 == "DELETED" && got[1].1 == "wa",
        "a watch from MODIFIED wa's resourceVersion must send only the later ADDED wb, DELETED wa; got {got:?}"
    );
    // Without a resourceVersion: the current state as ADDED first.
    let mut fresh = ctx.watch("timeoutSeconds=30").await?;
    let got = take(&mut fresh, 1).await?;
    ensure!(
        got[0].0 == "ADDED" && got[0].1 == "wb" && got[0].2 == expected[2].2,
        "a watch without resourceVersion starts with ADDED for each object (wb), got {got:?}"
    );
    Ok(())
}

pub(super) async fn watch_bookmarks<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    initial_events_end(ctx).await?;
    progress_bookmark(ctx).await
}

/// `sendInitialEvents=true`: ADDED for each object, then a BOOKMARK of the resource's kind
/// annotated `k8s.io/initial-events-end: "true"`, then the changes.
async fn initial_events_end<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    ctx.create_sample("ba", &[]).await?;
    let b = ctx.create_sample("bb", &[]).await?;
    let query = "sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=30";
    let mut events = ctx.watch(query).await?;
    let initial = take(&mut events, 2).await?;
    let mut names: Vec<_> = initial
        .iter()
        .map(|e| (e.0.as_str(), e.1.as_str()))
        .collect();
    names.sort();
    ensure!(
        names == [("ADDED", "ba"), ("ADDED", "bb")],
        "sendInitialEvents starts with ADDED for each object, got {initial:?}"
    );
    match events.next(10).await? {
        Some(WatchEvent::Bookmark(bookmark)) => {
            of_the_version_watched(ctx, &bookmark)?;
            ensure!(
                bookmark
                    .metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .map(String::as_str)
                    == Some("true"),
                "the bookmark after the initial events is annotated k8s.io/initial-events-end: \"true\", got {:?}",
                bookmark.metadata.annotations
            );
            ensure!(
                !bookmark.metadata.resource_version.is_empty(),
                "a bookmark carries a resourceVersion"
            );
        }
        other => {
            return Err(format!(
                "after the initial events comes the initial-events-end BOOKMARK, got {:?}",
                other.as_ref().map(describe)
            ));
        }
    }
    let mut changed = b.clone();
    changed["metadata"]["labels"]["conformance.example.com/step"] = Value::from("1");
    let written = ctx.update(&changed).await?;
    let next = take(&mut events, 1).await?;
    ensure!(
        next[0] == seen("MODIFIED", "bb", &resource_version(&written)),
        "after the bookmark the watch goes on with the changes, got {next:?}"
    );
    Ok(())
}

/// A bookmark is an object of the kind and version watched (kube-apiserver's watch encoder
/// converts the cacher's empty bookmark object to the version the client asked for), which
/// a client decodes as such: a version served converted sends none of its storage version.
fn of_the_version_watched<K: Resource>(
    ctx: &Ctx<'_, K>,
    bookmark: &kube::core::watch::Bookmark,
) -> Outcome {
    let info = ctx.info();
    ensure!(
        bookmark.types.api_version == info.api_version() && bookmark.types.kind == info.kind,
        "a bookmark of a watch of {} is an object of that version and kind ({} {}), got {} {}",
        info.api_version(),
        info.api_version(),
        info.kind,
        bookmark.types.api_version,
        bookmark.types.kind
    );
    Ok(())
}

/// `allowWatchBookmarks=true` on a watch that selects nothing while another object is
/// written: the watch gets a BOOKMARK before its timeout, and a watch from the last
/// bookmark's resourceVersion starts after that write (the bookmark covered it).
async fn progress_bookmark<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let start = ctx.list("").await?;
    let start = start["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let selector = "conformance.example.com/tier=none";
    let query = format!(
        "resourceVersion={start}&allowWatchBookmarks=true&timeoutSeconds=4&labelSelector={selector}"
    );
    let mut events = ctx.watch(&query).await?;
    let unseen = ctx.create_sample("unseen", &[]).await?;
    let got = events.until_end(20).await?;
    let bookmarks: Vec<_> = got
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Bookmark(b) => Some(b),
            _ => None,
        })
        .map(|b| of_the_version_watched(ctx, b).map(|()| b.metadata.resource_version.clone()))
        .collect::<Result<_, _>>()?;
    ensure!(
        got.len() == bookmarks.len(),
        "a watch selecting nothing gets only bookmarks, got {:?}",
        got.iter().map(describe).collect::<Vec<_>>()
    );
    let Some(last) = bookmarks.last() else {
        return Err("a watch with allowWatchBookmarks=true and timeoutSeconds=4 gets a BOOKMARK before it ends (kube-apiserver sends one 2 s before the timeout) — none came".into());
    };
    let mut resumed = ctx
        .watch(&format!("resourceVersion={last}&timeoutSeconds=30"))
        .await?;
    let mut changed = unseen.clone();
    changed["metadata"]["labels"]["conformance.example.com/step"] = Value::from("1");
    let written = ctx.update(&changed).await?;
    let next = take(&mut resumed, 1).await?;
    ensure!(
        next[0] == seen("MODIFIED", "unseen", &resource_version(&written)),
        "a watch from the bookmark's resourceVersion {last:?} starts after the writes the bookmark covered: expected MODIFIED unseen, got {next:?}"
    );
    Ok(())
}

/// A watch with a label selector, as the cacher filters one: an object that stops matching
/// is DELETED for the watcher, one that starts matching is ADDED, others are not sent. The
/// objects `la` (`label=a`), `lb` (`label=b`) and `ln` (no label) exist.
pub(super) async fn selection_changes<K: Resource>(ctx: &Ctx<'_, K>, label: &str) -> Outcome {
    let start = ctx.list("").await?;
    let start = start["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let query = format!("resourceVersion={start}&timeoutSeconds=30&labelSelector={label}%3Da");
    let mut events = ctx.watch(&query).await?;
    // Each write also sets a step label of its own, so that none is a no-op.
    let relabel = |name: &'static str, value: &'static str, step: &'static str| async move {
        let mut object = ctx.get(&ctx.item(name)).await?.expect(200, "GET")?;
        object["metadata"]["labels"][label] = Value::from(value);
        object["metadata"]["labels"]["conformance.example.com/step"] = Value::from(step);
        ctx.update(&object).await
    };
    let left = relabel("la", "b", "1").await?;
    let entered = relabel("lb", "a", "2").await?;
    relabel("ln", "c", "3").await?;
    let changed = relabel("lb", "a", "4").await?;
    let expected = [
        seen("DELETED", "la", &resource_version(&left)),
        seen("ADDED", "lb", &resource_version(&entered)),
        seen("MODIFIED", "lb", &resource_version(&changed)),
    ];
    let got = take(&mut events, 3).await?;
    ensure!(
        got == expected,
        "a watch of {label}=a must see la leave (DELETED), lb enter (ADDED) and change, nothing of ln: {expected:?}, got {got:?}"
    );
    Ok(())
}
