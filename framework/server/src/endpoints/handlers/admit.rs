//! Admission of a subresource's request, as kube's handlers run it: an action's body under
//! its verb's operation, a connection's options under CONNECT.

use serde_json::Value;

use super::Call;
use super::write::admit_with;
use crate::admission::{Attributes, Operation};
use crate::error::Result;
use crate::registry::subresource::Subresource;

/// Runs the chain's mutating then validating step on `object` (the body of an action, the
/// options of a connection), as kube's handlers do for a subresource: the resource is the
/// parent's, the kind the parent's.
pub(super) async fn admit(
    call: &mut Call,
    sub: &Subresource,
    operation: Operation,
    options: Value,
    object: Option<Value>,
) -> Result<Option<Value>> {
    admit_with(call, options);
    let parent = sub.parent();
    let step = |mutating| {
        Attributes::of(
            call.ctx.admission_request(),
            (&parent, &parent),
            (operation, mutating),
            &call.info.name,
        )
    };
    let mut object = object;
    if let Some((chain, mut attributes)) = step(true) {
        attributes.object = object.clone();
        chain.admit(&mut attributes).await?;
        object = attributes.object;
    }
    if let Some((chain, mut attributes)) = step(false) {
        attributes.object = object.clone();
        chain.validate(&attributes).await?;
    }
    Ok(object)
}
