#!/usr/bin/env bash
# Starts or stops a throw-away PostgreSQL on 127.0.0.1 for the tests on the postgres backend
# (storage conformance, wardle's end-to-end tests).
# Usage: .ci/postgres.sh start | stop | status
# `start` installs Debian's postgresql (and openssl) when missing, creates a cluster in a fresh
# temporary directory as the `postgres` user (the server refuses to run as root), starts it on
# 127.0.0.1:54320 with trust authentication for loopback connections, creates the database
# `apiserver` and waits until it answers. The tests' default URL is
# postgres://postgres@127.0.0.1:54320/apiserver (APISERVER_TEST_POSTGRES overrides it).
# It also serves TLS with certificates of a throw-away CA: the role `apiserver_tls` may only log
# in over TLS with a client certificate (CN=apiserver_tls) of that CA; $TLS_DIR holds ca.crt,
# client.crt and client.key for the tests (APISERVER_TEST_POSTGRES_TLS overrides it).
set -euo pipefail

PORT=54320
DATABASE=apiserver
DATA_DIR="/tmp/apiserver-ci-postgres"
LOG_FILE="$DATA_DIR.log"
TLS_DIR="$DATA_DIR-tls"
TLS_ROLE=apiserver_tls

need() { command -v "$1" >/dev/null 2>&1; }

# The newest installed server's binaries (Debian keeps them out of PATH).
bin_dir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

install() {
  if [ -n "$(bin_dir)" ] && [ -x "$(bin_dir)/initdb" ] && need psql && need openssl; then
    return
  fi
  echo "installing Debian's postgresql and openssl" >&2
  export DEBIAN_FRONTEND=noninteractive
  # No cluster of the package's own (it would start one on port 5432): this script makes its.
  if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
    mkdir -p /etc/postgresql-common
    echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
  fi
  apt-get update -qq
  apt-get install -y -qq postgresql openssl >/dev/null
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

# A CA, a serving certificate for 127.0.0.1 and localhost, and a client certificate for the TLS
# role, all EC P-256 and valid for 30 days.
make_certificates() {
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  (
    cd "$TLS_DIR"
    local key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
    openssl req -x509 "${key[@]}" -days 30 -subj /CN=apiserver-ci-postgres-ca \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req "${key[@]}" -subj /CN=127.0.0.1 -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -extfile server.ext -out server.crt 2>/dev/null
    openssl req "${key[@]}" -subj "/CN=$TLS_ROLE" -keyout client.key -out client.csr 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -extfile client.ext -out client.crt 2>/dev/null
    rm -f ./*.csr ./*.ext ./*.srl
  )
  # The server's copies live in its data directory, owned by it (PostgreSQL refuses a key
  # others can read).
  cp "$TLS_DIR/server.crt" "$TLS_DIR/server.key" "$TLS_DIR/ca.crt" "$DATA_DIR/"
  chmod 600 "$DATA_DIR/server.key"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$DATA_DIR/server.crt" "$DATA_DIR/server.key" "$DATA_DIR/ca.crt"; fi
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
  make_certificates
  # The TLS role: a client certificate over TLS, nothing else; everyone else: trust on loopback.
  cat >"$DATA_DIR/pg_hba.conf" <<HBA
local all all trust
hostssl all $TLS_ROLE 127.0.0.1/32 cert
host all $TLS_ROLE 127.0.0.1/32 reject
host all all 127.0.0.1/32 trust
host all all ::1/128 trust
HBA
  # Loopback only; the socket directory is the data directory (no /run/postgresql needed).
  as_postgres "$bin/pg_ctl" -D "$DATA_DIR" -l "$LOG_FILE" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA_DIR -c max_connections=300 -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key -c ssl_ca_file=ca.crt" \
    start >/dev/null
  as_postgres "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DATABASE"
  psql "postgres://postgres@127.0.0.1:$PORT/$DATABASE" -qc \
    "CREATE ROLE $TLS_ROLE LOGIN; GRANT CREATE ON DATABASE $DATABASE TO $TLS_ROLE;" >/dev/null
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
