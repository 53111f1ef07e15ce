#!/usr/bin/env bash
# Starts or stops a throw-away PostgreSQL on 127.0.0.1 for the tests on the postgres backend
# (storage conformance, wardle's end-to-end tests).
# Usage: .ci/postgres.sh start | stop | status
# `start` installs Debian's postgresql when missing, creates a cluster in a fresh temporary
# directory as the `postgres` user (the server refuses to run as root), starts it on
# 127.0.0.1:54320 with trust authentication for loopback connections, creates the database
# `apiserver` and waits until it answers. The tests' default URL is
# postgres://postgres@127.0.0.1:54320/apiserver (APISERVER_TEST_POSTGRES overrides it).
set -euo pipefail

PORT=54320
DATABASE=apiserver
DATA_DIR="/tmp/apiserver-ci-postgres"
LOG_FILE="$DATA_DIR.log"

need() { command -v "$1" >/dev/null 2>&1; }

# The newest installed server's binaries (Debian keeps them out of PATH).
bin_dir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

install() {
  if [ -n "$(bin_dir)" ] && [ -x "$(bin_dir)/initdb" ] && need psql; then
    return
  fi
  echo "installing Debian's postgresql" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
}

# Runs a command as the postgres user (or as ourselves when we are not root).
as_postgres() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

healthy() {
  need psql && psql "postgres://postgres@127.0.0.1:$PORT/$DATABASE" -qtAc 'SELECT 1' >/dev/null 2>&1
}

start() {
  install
  if healthy; then
    echo "postgres already answers on 127.0.0.1:$PORT" >&2
    return
  fi
  local bin
  bin="$(bin_dir)"
  # A fresh cluster each time: the tests want no data from an earlier run.
  stop
  rm -rf "$DATA_DIR" "$LOG_FILE"
  mkdir -p "$DATA_DIR"
  touch "$LOG_FILE"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$DATA_DIR" "$LOG_FILE"; fi
  as_postgres "$bin/initdb" -D "$DATA_DIR" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
    >>"$LOG_FILE" 2>&1
  # Loopback only; the socket directory is the data directory (no /run/postgresql needed).
  as_postgres "$bin/pg_ctl" -D "$DATA_DIR" -l "$LOG_FILE" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA_DIR -c max_connections=300 -c fsync=on" \
    start >/dev/null
  as_postgres "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DATABASE"
  for _ in $(seq 1 100); do
    if healthy; then
      echo "postgres answers on 127.0.0.1:$PORT (database $DATABASE)" >&2
      return
    fi
    sleep 0.2
  done
  echo "postgres did not answer; its log:" >&2
  cat "$LOG_FILE" >&2
  stop
  exit 1
}

stop() {
  local bin
  bin="$(bin_dir)"
  if [ -n "$bin" ] && [ -f "$DATA_DIR/postmaster.pid" ]; then
    as_postgres "$bin/pg_ctl" -D "$DATA_DIR" -m fast -w stop >/dev/null 2>&1 || true
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  # Exit status 0 when a postgres already answers on 127.0.0.1:$PORT.
  status) healthy ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
