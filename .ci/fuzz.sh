#!/usr/bin/env bash
# Builds every fuzz target (fuzz/, libFuzzer through cargo-fuzz) and runs each for
# FUZZ_SECONDS (default 20) from its seed corpus. FUZZ_DEV=1 builds without optimizations
# (quicker to build, slower to run: what the test suite uses). Installs cargo-fuzz when missing. libFuzzer
# needs a nightly compiler for its instrumentation flags: the nightly toolchain when rustup has
# one, else the stable one with RUSTC_BOOTSTRAP=1, without a sanitizer (it needs nightly's
# runtime). A failure leaves the input under fuzz/artifacts/<target>/: fix the code, and keep
# the input in fuzz/regressions/<target>/ (the normal test suite runs those).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-20}

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
  sanitizer=address
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
  sanitizer=none
fi
# Its own target directory: the instrumented build shares nothing with the normal one.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-target/fuzz}
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^extension-apiserver-fuzz$')
profile=()
[ "${FUZZ_DEV:-}" = 1 ] && profile=(--dev)
"${fuzz[@]}" build "${profile[@]}" --sanitizer "$sanitizer"
log=$(mktemp)
for target in $targets; do
  mkdir -p "fuzz/corpus/$target"
  # A scratch copy of the corpus: what the run finds is not committed by accident.
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$target/." "$work/"
  echo "== fuzz $target (${seconds}s)"
  if ! "${fuzz[@]}" run "${profile[@]}" --sanitizer "$sanitizer" "$target" "$work" -- \
    -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz target $target failed: the input is in fuzz/artifacts/$target/" >&2
    rm -rf "$work" "$log"
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|new_units_added)' "$log" || tail -n 3 "$log"
  rm -rf "$work"
done
rm -f "$log"
