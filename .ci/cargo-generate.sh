#!/usr/bin/env bash
# Installs cargo-generate (for the template test in .ci/test), unless `cargo generate` already
# works. `cargo install cargo-generate --locked` fails on rustc 1.95: its lock file holds
# cargo-util-schemas and kstring versions that want rustc 1.96. So the crate's source is
# fetched, those two are pinned back to versions that build on 1.95, and it is installed from
# that source with its own target directory, all in a temp dir removed afterwards (~6 min).
set -euo pipefail
if cargo generate --version >/dev/null 2>&1; then
  exit 0
fi
version=0.26.0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Fetch the crate's source through cargo itself: a throwaway project depending on it.
mkdir -p "$tmp/fetch/src"
cat >"$tmp/fetch/Cargo.toml" <<TOML
[package]
name = "fetch-cargo-generate"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
cargo-generate = { version = "=$version", default-features = false }
TOML
touch "$tmp/fetch/src/lib.rs"
(cd "$tmp/fetch" && cargo fetch --quiet)
crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"cargo-generate-$version.crate" | head -n 1)
tar -xzf "$crate" -C "$tmp"

cd "$tmp/cargo-generate-$version"
cargo update --quiet -p cargo-util-schemas --precise 0.14.1
cargo update --quiet -p kstring --precise 2.0.2
CARGO_TARGET_DIR="$tmp/target" cargo install --quiet --path . --locked
cargo generate --version
