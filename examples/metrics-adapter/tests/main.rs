//! metrics-adapter's end-to-end tests, one binary: each file is a module.

mod common;
mod failures;
mod hpa;
mod manifests;
mod resource;
