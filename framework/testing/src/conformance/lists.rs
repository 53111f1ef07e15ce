//! Lists: label and field selectors, pagination and its expiry, and the `Table` form.

use serde_json::Value;

use extension_apiserver::runtime::Resource;

use super::Outcome;
use super::client::{Ctx, OTHER_NAMESPACE, ensure, expect_status, names, resource_version};

const TIER: &str = "conformance.example.com/tier";

/// `labelSelector`, as `labels.Parse` reads it: `!=` and `notin` also select objects
/// without the label; on a watch, objects entering and leaving the selection.
pub(super) async fn label_selectors<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    ctx.create_sample("la", &[(TIER, "a")]).await?;
    ctx.create_sample("lb", &[(TIER, "b")]).await?;
    ctx.create_sample("ln", &[]).await?;
    let cases: [(&str, &[&str]); 7] = [
        ("{T}=a", &["la"]),
        ("{T}==a", &["la"]),
        ("{T}!=a", &["lb", "ln"]),
        ("{T} in (a,b)", &["la", "lb"]),
        ("{T} notin (a)", &["lb", "ln"]),
        ("{T}", &["la", "lb"]),
        ("!{T}", &["ln"]),
    ];
    for (selector, want) in cases {
        let selector = selector.replace("{T}", TIER);
        let list = ctx.list(&query("labelSelector", &selector)).await?;
        ensure!(
            names(&list) == want,
            "labelSelector {selector:?} must select {want:?}, got {:?}",
            names(&list)
        );
    }
    let reply = ctx
        .get(&format!(
            "{}?{}",
            ctx.collection(ctx.ns()),
            query("labelSelector", "a in (b")
        ))
        .await?;
    expect_status(&reply, 400, "BadRequest", None)
        .map_err(|e| format!("a malformed labelSelector: {e}"))?;
    super::watch::selection_changes(ctx, TIER).await
}

/// `fieldSelector` on the fields every object has, and on the resource's selectable fields
/// (values from the stored samples); an unknown field is 400 BadRequest.
pub(super) async fn field_selectors<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let mut stored = Vec::new();
    for name in ["fa", "fb"] {
        stored.push(ctx.create_sample(name, &[]).await?);
    }
    expect_selected(ctx, None, "metadata.name=fa", &["fa"]).await?;
    expect_selected(ctx, None, "metadata.name!=fa", &["fb"]).await?;
    if ctx.namespaced() {
        let other = ctx.object("fo", Some(OTHER_NAMESPACE));
        ctx.create(&other).await?;
        let all = ctx.list_in(None, "").await?;
        ensure!(
            names(&all) == ["fa", "fb", "fo"],
            "a list across namespaces must hold every namespace's objects, got {:?}",
            names(&all)
        );
        let selector = format!("metadata.namespace={OTHER_NAMESPACE}");
        expect_selected(ctx, Some(None), &selector, &["fo"]).await?;
        expect_selected(ctx, None, &selector, &[]).await?;
    }
    for path in ctx.info().selectable_fields {
        let value = field_value(&stored[0], path);
        let same: Vec<&str> = ["fa", "fb"]
            .into_iter()
            .zip(&stored)
            .filter(|(_, o)| field_value(o, path) == value)
            .map(|(n, _)| n)
            .collect();
        let other: Vec<&str> = ["fa", "fb"]
            .into_iter()
            .filter(|n| !same.contains(n))
            .collect();
        expect_selected(ctx, None, &format!("{path}={value}"), &same).await?;
        expect_selected(ctx, None, &format!("{path}!={value}"), &other).await?;
    }
    let reply = ctx
        .get(&format!(
            "{}?{}",
            ctx.collection(ctx.ns()),
            query("fieldSelector", "spec.noSuchField=x")
        ))
        .await?;
    expect_status(&reply, 400, "BadRequest", None)
        .map_err(|e| format!("a fieldSelector on an unsupported field: {e}"))
}

/// Lists `ns` (`None`: the default namespace; `Some(None)`: all namespaces) with
/// `fieldSelector=selector` and expects `want`.
async fn expect_selected<K: Resource>(
    ctx: &Ctx<'_, K>,
    ns: Option<Option<&str>>,
    selector: &str,
    want: &[&str],
) -> Outcome {
    let ns = ns.unwrap_or(ctx.ns());
    let list = ctx.list_in(ns, &query("fieldSelector", selector)).await?;
    ensure!(
        names(&list) == want,
        "fieldSelector {selector:?} must select {want:?}, got {:?}",
        names(&list)
    );
    Ok(())
}

/// The value of dotted `path` in `object` as a field selector compares it: a string, or a
/// number or boolean printed, or empty when missing.
fn field_value(object: &Value, path: &str) -> String {
    let path = path.trim_start_matches('.');
    let value = path.split('.').fold(object, |v, part| &v[part]);
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `limit`/`continue` pages, all at the first page's resourceVersion: an object created
/// after the first page is not listed, one deleted after it still is.
pub(super) async fn pagination<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let all = ["page-0", "page-1", "page-2", "page-3", "page-4"];
    for name in all {
        ctx.create_sample(name, &[]).await?;
    }
    let first = ctx.list("limit=2").await?;
    ensure!(
        names(&first) == all[..2],
        "limit=2 must give the first 2 objects in name order, got {:?}",
        names(&first)
    );
    ensure!(
        first["metadata"]["remainingItemCount"] == 3,
        "the first page must say remainingItemCount: 3, got {}",
        first["metadata"]
    );
    let snapshot = first["metadata"]["resourceVersion"].clone();
    ctx.create_sample("page-9", &[]).await?;
    ctx.delete(&ctx.item("page-3"), None)
        .await?
        .expect(200, "DELETE page-3")?;
    let mut listed = names(&first);
    let mut page = first;
    for _ in 0..all.len() {
        let Some(token) = page["metadata"]["continue"]
            .as_str()
            .filter(|t| !t.is_empty())
        else {
            break;
        };
        page = ctx
            .list(&format!("limit=2&{}", query("continue", token)))
            .await?;
        ensure!(
            page["metadata"]["resourceVersion"] == snapshot,
            "every page must be at the first page's resourceVersion {snapshot}, got {}",
            page["metadata"]
        );
        listed.extend(names(&page));
    }
    ensure!(
        listed == all,
        "the pages must list the objects of the first page's resourceVersion, each once, in order: {all:?}, got {listed:?}"
    );
    let reply = ctx
        .get(&format!(
            "{}?limit=2&continue=not-a-token",
            ctx.collection(ctx.ns())
        ))
        .await?;
    expect_status(&reply, 400, "BadRequest", None)
        .map_err(|e| format!("a malformed continue token: {e}"))
}

/// A `continue` token whose resourceVersion storage has compacted away:
/// 410 `Expired` (`errors.NewResourceExpired`) with a token for the rest at the latest
/// revision (the etcd3 store's `handleCompactedErrorForPaging`), and a new list works.
pub(super) async fn expired_continue<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    for name in ["exp-0", "exp-1", "exp-2"] {
        ctx.create_sample(name, &[]).await?;
    }
    let first = ctx.list("limit=1").await?;
    let token = first["metadata"]["continue"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure!(
        !token.is_empty(),
        "limit=1 of 3 objects must give a continue token: {}",
        first["metadata"]
    );
    // A change after the first page, then compaction: the first page's revision is gone.
    let changed = ctx.get(&ctx.item("exp-2")).await?.expect(200, "GET")?;
    let mut changed = changed;
    changed["metadata"]["labels"][TIER] = Value::from("changed");
    ctx.update(&changed).await?;
    ctx.server.compact().await;
    let reply = ctx
        .get(&format!(
            "{}?limit=1&{}",
            ctx.collection(ctx.ns()),
            query("continue", &token)
        ))
        .await?;
    expect_status(&reply, 410, "Expired", None)
        .map_err(|e| format!("a continue token older than the compaction: {e}"))?;
    // kube-apiserver's "inconsistent continue": the 410 offers a token that goes on from the
    // same key at the latest revision.
    let offered = reply.body["metadata"]["continue"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        !offered.is_empty(),
        "the 410 for an expired continue carries metadata.continue, a token for the rest at the latest resourceVersion (kube-apiserver's inconsistent continue), got {}",
        reply.body
    );
    let rest = ctx.list(&query("continue", offered)).await?;
    ensure!(
        names(&rest) == ["exp-1", "exp-2"]
            && rest["items"][1]["metadata"]["labels"][TIER] == "changed",
        "the offered token lists the rest (exp-1, exp-2) as they are now, got {:?}",
        rest["items"]
    );
    let relist = ctx.list("").await?;
    ensure!(
        names(&relist).len() == 3,
        "a new list after 410 must list everything, got {:?}",
        names(&relist)
    );
    Ok(())
}

/// The `Table` kubectl asks for: Name, then the resource's printer columns (name, type,
/// priority), a row per object with its name first and its `PartialObjectMetadata`.
pub(super) async fn table<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let objects = [
        ctx.create_sample("ta", &[]).await?,
        ctx.create_sample("tb", &[]).await?,
    ];
    let uri = ctx.collection(ctx.ns());
    let reply = ctx
        .call(
            http::Method::GET,
            &uri,
            None,
            "application/json",
            Some(accept),
        )
        .await?;
    let table = reply.expect(200, "a list as Table")?;
    check_table(ctx, &table, &objects)?;
    ensure!(
        !resource_version(&table).is_empty(),
        "a Table of a list carries the list's metadata.resourceVersion: {}",
        table["metadata"]
    );
    let reply = ctx
        .call(
            http::Method::GET,
            &ctx.item("ta"),
            None,
            "application/json",
            Some(accept),
        )
        .await?;
    let table = reply.expect(200, "one object as Table")?;
    check_table(ctx, &table, &objects[..1])
}

fn check_table<K: Resource>(ctx: &Ctx<'_, K>, table: &Value, objects: &[Value]) -> Outcome {
    ensure!(
        table["kind"] == "Table" && table["apiVersion"] == "meta.k8s.io/v1",
        "kind Table, apiVersion meta.k8s.io/v1 expected, got {} {}",
        table["kind"],
        table["apiVersion"]
    );
    let columns = table["columnDefinitions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        columns
            .first()
            .is_some_and(|c| c["name"] == "Name" && c["type"] == "string" && c["format"] == "name"),
        "the first column is Name (type string, format name), got {:?}",
        columns.first()
    );
    let printer = ctx.info().printer_columns;
    for (i, want) in printer.iter().enumerate() {
        let got = &columns.get(i + 1).cloned().unwrap_or_default();
        ensure!(
            got["name"] == want.name
                && got["type"] == want.type_.as_str()
                && got["priority"] == want.priority,
            "column {} must be the printer column {:?} (type {}, priority {}), got {got}",
            i + 1,
            want.name,
            want.type_.as_str(),
            want.priority
        );
    }
    let rows = table["rows"].as_array().cloned().unwrap_or_default();
    ensure!(
        rows.len() == objects.len(),
        "one row per object: {} expected, got {}",
        objects.len(),
        rows.len()
    );
    for (row, object) in rows.iter().zip(objects) {
        check_row(ctx, row, object, columns.len())?;
    }
    Ok(())
}

/// A row of `object` in a table of `columns` columns: the name, the printer columns'
/// values (for plain paths) and the object's `PartialObjectMetadata`.
fn check_row<K: Resource>(
    ctx: &Ctx<'_, K>,
    row: &Value,
    object: &Value,
    columns: usize,
) -> Outcome {
    let printer = ctx.info().printer_columns;
    let name = &object["metadata"]["name"];
    let cells = row["cells"].as_array().cloned().unwrap_or_default();
    ensure!(
        cells.len() == columns,
        "a row has a cell per column, got {row}"
    );
    ensure!(
        &cells[0] == name,
        "a row's first cell is the object's name {name}, got {row}"
    );
    for (i, column) in printer.iter().enumerate() {
        if let Some(want) = simple_path_value(object, column.json_path) {
            ensure!(
                cells[i + 1] == want,
                "column {:?} of {name} shows {} ({}), got {}",
                column.name,
                want,
                column.json_path,
                cells[i + 1]
            );
        }
    }
    let meta = &row["object"];
    ensure!(
        meta["kind"] == "PartialObjectMetadata"
            && meta["apiVersion"] == "meta.k8s.io/v1"
            && &meta["metadata"]["name"] == name,
        "a row's object is the object's PartialObjectMetadata (includeObject=Metadata, the default), got {meta}"
    );
    Ok(())
}

/// The value at a plain `.a.b` path holding a string, number or boolean (what a cell shows
/// as is); `None` for other paths and values, which the suite does not check.
fn simple_path_value(object: &Value, path: &str) -> Option<Value> {
    let rest = path.strip_prefix('.')?;
    if rest.is_empty()
        || !rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
    {
        return None;
    }
    let value = rest.split('.').fold(object, |v, part| &v[part]);
    matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_)).then(|| value.clone())
}

/// `key=value`, percent-encoded.
fn query(key: &str, value: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair(key, value)
        .finish()
}
