//! catalog's end-to-end tests, one binary: each file is a module.

mod conventions;
mod kube_client;
mod kubectl;
