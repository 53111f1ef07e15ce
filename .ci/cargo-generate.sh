#!/usr/bin/env bash
# Installs cargo-generate (for the template test in .ci/test), unless `cargo generate` already
# works. `cargo install cargo-generate --locked` fails on rustc 1.95: its lock file holds
# cargo-util-schemas and kstring versions that want rustc 1.96. So the crate's source is
# fetched, those two are pinned back to versions that build on 1.95, and it is installed from
# that source with its own target directory, all in a temp dir removed afterwards. Without
# the default `git` feature (gix and reqwest, half the build: ~5 min instead of ~12 on two
# busy cores): templates are used with `--path`, never fetched with `--git`.
set -euo pipefail
if cargo generate --version >/dev/null 2>&1; then
  exit 0
fi
version=0.26.0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The crate's source, fetched through cargo itself (a throwaway project depending on it)
# unless cargo's cache already has it.
cache="${CARGO_HOME:-$HOME/.cargo}/registry/cache"
crate=$(ls "$cache"/*/"cargo-generate-$version.crate" 2>/dev/null | head -n 1 || true)
if [ -z "$crate" ]; then
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
  crate=$(ls "$cache"/*/"cargo-generate-$version.crate" | head -n 1)
fi
tar -xzf "$crate" -C "$tmp"

cd "$tmp/cargo-generate-$version"
cargo update --quiet -p cargo-util-schemas --precise 0.14.1
cargo update --quiet -p kstring --precise 2.0.2
CARGO_TARGET_DIR="$tmp/target" cargo install --quiet --path . --locked --no-default-features \
  --features new-ui
cargo generate --version
