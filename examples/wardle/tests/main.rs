//! wardle's end-to-end tests, one binary: each file is a module, `common` their helpers.

mod common;
mod conventions;
mod delegated;
mod etcd;
mod http;
mod kube_client;
mod kubectl;
mod lifecycle;
mod manifests;
mod migrate_storage;
mod postgres;
mod postgres_faults;
mod readme;
mod reliability;
