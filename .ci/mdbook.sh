#!/usr/bin/env bash
# Installs mdBook 0.5.x (the book's builder) unless it is already there. The build's objects go
# to a temporary target directory, removed afterwards, so a developer's target stays as it was.
set -euo pipefail
version=0.5.4
if mdbook --version 2>/dev/null | grep -q '^mdbook v0\.5\.'; then
  exit 0
fi
echo "installing mdbook $version (cargo install, a few minutes)" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CARGO_TARGET_DIR="$tmp" cargo install mdbook --version "$version" --locked
