//! runner's end-to-end tests, one binary: each file is a module.

mod actions;
mod attach;
mod authorization;
mod common;
mod lifecycle;
mod log;
mod ws;
