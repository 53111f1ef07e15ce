//! The `Status` a failed request gets: 404 `NotFound`, 409 `AlreadyExists`, 422 `Invalid`,
//! shaped as `k8s.io/apimachinery/pkg/api/errors` builds them.

use serde_json::json;

use extension_apiserver::runtime::Resource;

use super::Outcome;
use super::client::{Ctx, ensure, expect_status, names, resource_version};

/// `errors.NewNotFound(qualifiedResource, name)`: details name the object, the group and
/// the resource's plural.
pub(super) async fn not_found<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let info = ctx.info();
    let details = Some(("missing", info.group, info.plural));
    let uri = ctx.item("missing");
    let reply = ctx.get(&uri).await?;
    expect_status(&reply, 404, "NotFound", details).map_err(|e| format!("GET: {e}"))?;
    let patch = json!({"metadata": {"labels": {"conformance.example.com/x": "y"}}});
    let reply = ctx.merge_patch(&uri, &patch).await?;
    expect_status(&reply, 404, "NotFound", details).map_err(|e| format!("PATCH: {e}"))?;
    let reply = ctx.delete(&uri, None).await?;
    expect_status(&reply, 404, "NotFound", details).map_err(|e| format!("DELETE: {e}"))?;
    ensure!(
        names(&ctx.list("").await?).is_empty(),
        "requests for a missing object created one"
    );
    Ok(())
}

/// `errors.NewAlreadyExists(qualifiedResource, name)`; the stored object stays as it was.
pub(super) async fn already_exists<K: Resource>(ctx: &Ctx<'_, K>) -> Outcome {
    let info = ctx.info();
    let first = ctx.create_sample("twice", &[]).await?;
    let mut again = ctx.object("twice", ctx.ns());
    again["metadata"]["labels"] = json!({"conformance.example.com/second": "true"});
    let reply = ctx.post(&ctx.collection(ctx.ns()), &again).await?;
    expect_status(
        &reply,
        409,
        "AlreadyExists",
        Some(("twice", info.group, info.plural)),
    )?;
    let stored = ctx.get(&ctx.item("twice")).await?.expect(200, "GET")?;
    ensure!(
        stored["metadata"]["uid"] == first["metadata"]["uid"]
            && resource_version(&stored) == resource_version(&first),
        "the refused create changed the stored object: {stored}"
    );
    Ok(())
}

/// `errors.NewInvalid(qualifiedKind, name, causes)`: details name the object, the group and
/// the Kind, with a cause per field error; nothing is stored. Checked with a name no
/// Kubernetes name rule allows, and with the user's invalid object when given.
pub(super) async fn invalid<K: Resource>(
    ctx: &Ctx<'_, K>,
    user_invalid: Option<&(dyn Fn(&str) -> K + Send + Sync)>,
) -> Outcome {
    let bad_name = "Not/A_Name";
    let object = ctx.object(bad_name, ctx.ns());
    expect_invalid(ctx, &object, bad_name, Some("metadata.name"))
        .await
        .map_err(|e| format!("a create named {bad_name:?}: {e}"))?;
    if let Some(invalid) = user_invalid {
        let mut object = ctx.json_of(&invalid("invalid"));
        object["metadata"]["name"] = json!("invalid");
        if let Some(ns) = ctx.ns() {
            object["metadata"]["namespace"] = json!(ns);
        }
        expect_invalid(ctx, &object, "invalid", None)
            .await
            .map_err(|e| format!("the `invalid` object: {e}"))?;
    }
    ensure!(
        names(&ctx.list("").await?).is_empty(),
        "an invalid object was stored"
    );
    Ok(())
}

/// A create of `object` is 422 `Invalid` naming `name`, with causes (one on `field`).
async fn expect_invalid<K: Resource>(
    ctx: &Ctx<'_, K>,
    object: &serde_json::Value,
    name: &str,
    field: Option<&str>,
) -> Outcome {
    let info = ctx.info();
    let reply = ctx.post(&ctx.collection(ctx.ns()), object).await?;
    expect_status(&reply, 422, "Invalid", Some((name, info.group, info.kind)))?;
    let causes = reply.body["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        !causes.is_empty(),
        "422 Invalid needs details.causes (reason, message, field), got {}",
        reply.body
    );
    if let Some(field) = field {
        ensure!(
            causes.iter().any(|c| c["field"] == field),
            "422 Invalid needs a cause with field {field:?}, got {}",
            reply.body
        );
    }
    Ok(())
}
