//! runner's end-to-end tests, one binary: each file is a module.

mod common;
mod lifecycle;
