//! # extension-apiserver-machinery
//!
//! The object model of [extension-apiserver](https://docs.rs/extension-apiserver), what
//! Kubernetes keeps in `k8s.io/apimachinery` and `sigs.k8s.io/structured-merge-diff`, and
//! the few things every layer above stands on (`k8s.io/component-base`'s part):
//!
//! - [`runtime`]: the [`Resource`](runtime::Resource) trait and its static
//!   [`ResourceInfo`](runtime::ResourceInfo), conversion between versions, field errors,
//!   JSONPath, object helpers;
//! - [`error`]: errors as kube-apiserver's `Status`; [`codec`]: typed objects to and from
//!   JSON, and between a served version and the storage version;
//! - [`cel`]: the Common Expression Language with Kubernetes' libraries and cost limits, as
//!   `x-kubernetes-validations`, ValidatingAdmissionPolicy and webhooks' `matchConditions`
//!   evaluate it;
//! - [`selector`] (label and field selectors), [`validation`] (names, labels, annotations),
//!   [`patch`] (JSON, merge and strategic merge patches, apply), [`fieldmanager`]
//!   (managedFields and server-side apply), [`warning`] (the client's warnings);
//! - below every stage: [`tls`] (certificates and keys), [`metrics`] (the process's
//!   registry), [`lifecycle`] (shutdown and readiness), [`spans`], [`user`] (who made a
//!   request, as authentication found them), and [`hash`] (the hashers of the server's own
//!   tables).
//!
//! It depends on no HTTP, storage or server crate (the `axum` feature makes
//! [`Error`] an axum response, for the server crate).
#![warn(missing_docs)]

pub mod cel;
pub mod codec;
pub mod error;
pub mod fieldmanager;
pub mod hash;
pub mod lifecycle;
pub mod metrics;
pub mod patch;
pub mod runtime;
pub mod schema_errors;
pub mod selector;
pub mod spans;
pub mod tls;
pub mod user;
pub mod validation;
pub mod warning;

pub use error::{Error, Result, StatusReason};
pub use runtime::{FieldError, FieldErrorType};
