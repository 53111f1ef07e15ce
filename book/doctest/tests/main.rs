//! The book's checks, one binary: its flag reference, its getting-started project, its links.

mod flags;
mod getting_started;
mod links;
