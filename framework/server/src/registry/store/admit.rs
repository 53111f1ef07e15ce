//! The admission chain as the store runs it, inside its write loops (see
//! [`admission`](crate::admission) for what runs when).

use serde_json::Value;

use super::Inner;
use super::codec::{decode_typed, encode_typed};
use crate::admission::{Attributes, Operation};
use crate::error::Result;
use crate::registry::context::RequestContext;
use crate::registry::options::FieldValidation;
use crate::registry::strategy::Strategy;
use crate::runtime::ResourceInfo;

/// How the objects of a subresource of another kind appear to admission: the scale
/// subresource's plugins see `Scale`s, as kube's `scaleUpdatedObjectInfo` shows them.
pub(crate) trait AdmissionView: Send + Sync {
    /// The kind plugins see.
    fn info(&self) -> &ResourceInfo;
    /// The object as plugins see it.
    fn project(&self, object: &Value) -> Result<Value>;
    /// What a mutating plugin made of the projection, written back to the object.
    fn inject(&self, object: &mut Value, projected: &Value) -> Result<()>;
}

/// What one write admits: the store, the request, and the view of a subresource of another
/// kind.
#[derive(Clone, Copy)]
pub(crate) struct Admit<'a> {
    pub(crate) inner: &'a Inner,
    pub(crate) ctx: &'a RequestContext,
    pub(crate) view: Option<&'a dyn AdmissionView>,
}

impl<'a> Admit<'a> {
    pub(crate) fn new(inner: &'a Inner, ctx: &'a RequestContext) -> Self {
        Self {
            inner,
            ctx,
            view: None,
        }
    }

    /// The attributes of `operation` on `name`, when a plugin handles it (one that
    /// mutates, for the mutating step).
    fn attributes(
        &self,
        step: (Operation, bool),
        name: &str,
    ) -> Option<(crate::admission::Admission, Attributes)> {
        let kind = self.view.map_or(&self.inner.info, |v| v.info());
        Attributes::of(
            self.ctx.admission_request(),
            (&self.inner.info, kind),
            step,
            name,
        )
    }

    fn project(&self, object: &Value) -> Result<Value> {
        match self.view {
            Some(view) => view.project(object),
            None => Ok(object.clone()),
        }
    }

    /// The mutating step on `typed`, the new object of a create (`old` `None`) or an update:
    /// encoded for the plugins, decoded again only if one changed it, and then defaulted
    /// again, as kube defaults what a mutating webhook or policy returns (a field they set
    /// may bring defaults of its own; kube does it after each, here after the chain).
    pub(crate) async fn mutate<T: Strategy>(
        &self,
        operation: Operation,
        typed: &mut T,
        old: Option<&Value>,
    ) -> Result<()> {
        let name = typed.metadata().name.clone().unwrap_or_default();
        let Some((chain, mut attributes)) = self.attributes((operation, true), &name) else {
            return Ok(());
        };
        let object = encode_typed(typed)?;
        let projected = self.project(&object)?;
        attributes.object = Some(projected.clone());
        attributes.old_object = old.map(|old| self.project(old)).transpose()?;
        chain.admit(&mut attributes).await?;
        let Some(mutated) = attributes.object.filter(|m| *m != projected) else {
            return Ok(());
        };
        let mut object = object;
        match self.view {
            Some(view) => view.inject(&mut object, &mutated)?,
            None => object = mutated,
        }
        // A mutation that breaks the object is the admission's fault, not the client's: 500,
        // as kube-apiserver answers a webhook patch the object no longer decodes after.
        *typed = decode_typed(&object, FieldValidation::Ignore, self.ctx)
            .map_err(|e| crate::error::Error::internal(e.message()))?;
        typed.default_fields();
        Ok(())
    }

    /// The validating step: `object` as it will be stored (create, update), `old` as it is
    /// stored (update, delete).
    pub(crate) async fn validate(
        &self,
        operation: Operation,
        name: &str,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<()> {
        let Some((chain, mut attributes)) = self.attributes((operation, false), name) else {
            return Ok(());
        };
        attributes.object = object.map(|o| self.project(o)).transpose()?;
        attributes.old_object = old.map(|o| self.project(o)).transpose()?;
        chain.validate(&attributes).await
    }

    /// [`validate`](Self::validate) of the new object of a create or an update, handed to
    /// the plugins without a copy when they see it as it is (no view), and handed back.
    pub(crate) async fn validate_new(
        &self,
        operation: Operation,
        name: &str,
        object: Value,
        old: Option<&Value>,
    ) -> Result<Value> {
        if self.view.is_some() {
            self.validate(operation, name, Some(&object), old).await?;
            return Ok(object);
        }
        let Some((chain, mut attributes)) = self.attributes((operation, false), name) else {
            return Ok(object);
        };
        attributes.object = Some(object);
        attributes.old_object = old.map(|o| self.project(o)).transpose()?;
        chain.validate(&attributes).await?;
        Ok(attributes.object.take().expect("the object just given"))
    }

    /// The mutating step of a delete: no objects, as kube's delete handler admits it (once,
    /// before the store reads anything; with no name for a deletecollection).
    pub(crate) async fn mutate_delete(&self, name: &str) -> Result<()> {
        let Some((chain, mut attributes)) = self.attributes((Operation::Delete, true), name) else {
            return Ok(());
        };
        chain.admit(&mut attributes).await
    }
}
