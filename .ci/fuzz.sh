#!/usr/bin/env bash
# Builds every fuzz target (fuzz/, libFuzzer through cargo-fuzz) and runs each for
# FUZZ_SECONDS (default 20) from its seed corpus, FUZZ_JOBS of them (default: one per core) at
# a time. FUZZ_DEV=1 builds without optimizations (quicker to build, slower to run: what the
# test suite uses). Installs cargo-fuzz when missing. libFuzzer needs a nightly compiler for its
# instrumentation flags: the nightly toolchain when rustup has one, else the stable one with
# RUSTC_BOOTSTRAP=1, without a sanitizer (it needs nightly's runtime). A failure leaves the
# input under fuzz/artifacts/<target>/: fix the code, and keep the input in
# fuzz/regressions/<target>/ (the normal test suite runs those).
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
# The targets run side by side, FUZZ_JOBS at a time (default: one per core; a libFuzzer run
# without -jobs keeps one core busy). Each has its own log and scratch copy of its corpus (what
# a run finds is not committed by accident); the first failure ends the script with its log.
# Each run is a process group of its own (setsid: cargo-fuzz and the fuzzer it starts), so a
# failure stops the others' fuzzers too, not only their cargo-fuzz.
jobs=${FUZZ_JOBS:-$(nproc)}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
declare -A running=()
# Waits for one running target; prints its figures, or its log and the verdict on a failure.
reap() {
  local pid status=0 target
  wait -n -p pid "${!running[@]}" || status=$?
  target=${running[$pid]}
  unset "running[$pid]"
  if [ "$status" != 0 ]; then
    tail -n 60 "$scratch/$target.log"
    echo "fuzz target $target failed: the input is in fuzz/artifacts/$target/" >&2
    for pid in "${!running[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
    wait || true
    exit 1
  fi
  echo "== fuzz $target (${seconds}s)"
  grep -E '^stat::(number_of_executed_units|new_units_added)' "$scratch/$target.log" ||
    tail -n 3 "$scratch/$target.log"
}
for target in $targets; do
  mkdir -p "fuzz/corpus/$target" "$scratch/$target"
  cp -r "fuzz/corpus/$target/." "$scratch/$target/"
  setsid "${fuzz[@]}" run "${profile[@]}" --sanitizer "$sanitizer" "$target" "$scratch/$target" -- \
    -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 >"$scratch/$target.log" 2>&1 &
  running[$!]=$target
  if [ "${#running[@]}" -ge "$jobs" ]; then reap; fi
done
while [ "${#running[@]}" -gt 0 ]; do reap; done
