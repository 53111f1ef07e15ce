#!/usr/bin/env bash
# The cargo-generate template (templates/), used as a new user uses it: generate a project
# without prompts, once with a namespaced kind and once with a cluster-scoped one, depending on
# this checkout by path; check its README's two commands are the run and test commands; run
# the test command and clippy; start the server with the run command (on a free port) and use
# it with kubectl. Dependencies are shared with the workspace: its Cargo.lock is copied into
# each project and CARGO_TARGET_DIR is the workspace's target (unless already set).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bash .ci/cargo-generate.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
# cargo-generate without its git feature takes the projects' author from $USER.
export USER="${USER:-$(id -un)}"

tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill -- "-$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# The lines of the README's ```sh blocks, in order: the first is the run command, the second
# the test command.
readme_commands() {
  awk '/^```sh$/ {inside = 1; next} /^```$/ {inside = 0} inside && NF' "$1"
}

# Starts the README's run command in its own process group on a free port, waits (at most
# 60 s) until /readyz answers through the kubeconfig the server writes, and drives it. The
# project is built first: the 60 s are the server's, not the compiler's (on a busy machine
# `cargo run` can spend longer than that building).
check_run_command() {
  local dir=$1 command=$2 group=$3 kind=$4
  (cd "$dir" && cargo build --quiet)
  command=${command/--secure-port=8443/--secure-port=0}
  (cd "$dir" && exec setsid bash -c "exec $command" >"$tmp/server.log" 2>&1) &
  server_pid=$!
  local kubeconfig=$dir/.apiserver-local/kubeconfig ready=
  for _ in $(seq 120); do
    if [ -f "$kubeconfig" ] && kubectl --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; then
      ready=1
      break
    fi
    sleep 0.5
  done
  if [ -z "$ready" ]; then
    cat "$tmp/server.log" >&2
    echo "the README's run command did not serve within 60 s" >&2
    return 1
  fi
  kubectl --kubeconfig "$kubeconfig" api-resources --api-group="$group" | grep -q "$kind"
  printf 'apiVersion: %s\nkind: %s\nmetadata: {name: readme}\nspec: {replicas: 2}\n' \
    "$group/v1" "$kind" | kubectl --kubeconfig "$kubeconfig" apply -f -
  kubectl --kubeconfig "$kubeconfig" get "$(echo "$kind" | tr '[:upper:]' '[:lower:]')" readme
  kill -- "-$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}

# generate NAME KIND NAMESPACED
generate() {
  local name=$1 kind=$2 namespaced=$3 group=$1.example.com dir=$tmp/$1
  echo "== template: $name ($kind, namespaced=$namespaced)"
  cargo generate --path "$root/templates" --name "$name" --destination "$tmp" --vcs none \
    --silent -d group="$group" -d version=v1 -d kind="$kind" -d namespaced="$namespaced" \
    -d apiserver_path="$root"
  cp "$root/Cargo.lock" "$dir/"

  mapfile -t commands < <(readme_commands "$dir/README.md")
  case "${commands[0]}" in
    "cargo run -- --bind-address=127.0.0.1 --secure-port=8443 --cert-dir="*"--sqlite-path="*) ;;
    *) echo "README's first command is not the run command: ${commands[0]}" >&2; return 1 ;;
  esac
  case "${commands[1]}" in
    "cargo test"* | "bash"*) ;;
    *) echo "README's second command is not the test command: ${commands[1]}" >&2; return 1 ;;
  esac

  (cd "$dir" && cargo fmt --check && eval "${commands[1]}")
  (cd "$dir" && cargo clippy --all-targets -- -D warnings)
  check_run_command "$dir" "${commands[0]}" "$group" "$kind"
}

# Without a source for the framework the project depends on the published crates; with a git
# URL on that repository. (Only the manifests are checked: this run builds against the checkout.)
cargo generate --path "$root/templates" --name by-default --destination "$tmp" --vcs none \
  --silent -d group=bydefault.example.com -d version=v1 -d kind=Thing -d namespaced=true
grep -qx 'extension-apiserver = "0.1"' "$tmp/by-default/Cargo.toml"
grep -qx 'extension-apiserver-testing = "0.1"' "$tmp/by-default/Cargo.toml"
grep -q 'from crates.io (`extension-apiserver`' "$tmp/by-default/README.md"
cargo generate --path "$root/templates" --name by-git --destination "$tmp" --vcs none --silent \
  -d group=bygit.example.com -d version=v1 -d kind=Thing -d namespaced=true \
  -d apiserver_git=https://git.example.invalid/apiserver.git
grep -qx 'extension-apiserver = { git = "https://git.example.invalid/apiserver.git" }' "$tmp/by-git/Cargo.toml"
grep -qx 'extension-apiserver-testing = { git = "https://git.example.invalid/apiserver.git" }' \
  "$tmp/by-git/Cargo.toml"
rm -rf "$tmp/by-default" "$tmp/by-git"

start=$SECONDS
generate widget-server Widget true
generate cluster-policy-server ClusterPolicy false
echo "== template: both projects passed in $((SECONDS - start)) s"
