#!/usr/bin/env bash
# Starts or stops a throw-away etcd on 127.0.0.1 for the tests on etcd3 (storage conformance,
# wardle's end-to-end and reliability tests).
# Usage: .ci/etcd.sh start | stop | status
# `start` installs Debian's etcd-server and protoc (the etcd-client crate needs protoc to
# build) when missing, starts etcd in the background and waits until it answers.
set -euo pipefail

CLIENT_URL="http://127.0.0.1:23790"
PEER_URL="http://127.0.0.1:23800"
DATA_DIR="/tmp/apiserver-ci-etcd"
PID_FILE="$DATA_DIR.pid"
LOG_FILE="$DATA_DIR.log"

need() { command -v "$1" >/dev/null 2>&1; }

install() {
  # /usr/include/google/protobuf holds the well-known types that protoc imports.
  if need etcd && need etcdctl && need protoc && [ -d /usr/include/google/protobuf ]; then
    return
  fi
  echo "installing Debian's etcd-server, protobuf-compiler and libprotobuf-dev" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq etcd-server etcd-client protobuf-compiler libprotobuf-dev >/dev/null
}

healthy() {
  need etcdctl && etcdctl --endpoints="$CLIENT_URL" --command-timeout=2s endpoint health >/dev/null 2>&1
}

start() {
  install
  if healthy; then
    echo "etcd already answers on $CLIENT_URL" >&2
    return
  fi
  # A fresh data directory each time: the tests want no history from an earlier run.
  rm -rf "$DATA_DIR"
  etcd --name apiserver-ci --data-dir "$DATA_DIR" \
    --listen-client-urls "$CLIENT_URL" --advertise-client-urls "$CLIENT_URL" \
    --listen-peer-urls "$PEER_URL" --initial-advertise-peer-urls "$PEER_URL" \
    --initial-cluster "apiserver-ci=$PEER_URL" >"$LOG_FILE" 2>&1 &
  echo $! >"$PID_FILE"
  for _ in $(seq 1 100); do
    if healthy; then
      echo "etcd answers on $CLIENT_URL (pid $(cat "$PID_FILE"))" >&2
      return
    fi
    sleep 0.2
  done
  echo "etcd did not become healthy; its log:" >&2
  cat "$LOG_FILE" >&2
  stop
  exit 1
}

stop() {
  if [ -f "$PID_FILE" ]; then
    kill "$(cat "$PID_FILE")" 2>/dev/null || true
    rm -f "$PID_FILE"
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  # Exit status 0 when an etcd already answers on $CLIENT_URL.
  status) healthy ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
