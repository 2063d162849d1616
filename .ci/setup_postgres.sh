#!/usr/bin/env bash
# Start a throw-away PostgreSQL server for the `postgres` tests and print its URL:
#   export CEMCTL_TEST_PG_URL=$(.ci/setup_postgres.sh)
#   python3 -m pytest -q tests -m postgres
# Installs the server with apt-get if it is missing (needs root) and the psycopg driver
# with pip. Data lives in ${CEMCTL_PG_DIR:-/tmp/cemctl-pg}; port ${CEMCTL_PG_PORT:-55432}.
# Stop it with: su postgres -c "pg_ctl -D /tmp/cemctl-pg/data stop"
set -euo pipefail
DIR=${CEMCTL_PG_DIR:-/tmp/cemctl-pg}
PORT=${CEMCTL_PG_PORT:-55432}
DB=cemctl_test

log() { echo "setup_postgres: $*" >&2; }

if ! command -v initdb >/dev/null 2>&1; then
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
    if [ -z "$bin" ]; then
        log "installing postgresql"
        apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
        bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    fi
    export PATH="$bin:$PATH"
fi
python3 -c "import psycopg" 2>/dev/null || PIP_CONSTRAINT="$(dirname "$0")/../constraints/cpu.txt" python3 -m pip install -q "psycopg[binary]>=3.1" >&2

RUN=()
if [ "$(id -u)" = 0 ]; then RUN=(runuser -u postgres --); fi  # the server refuses to run as root
mkdir -p "$DIR"
if [ "$(id -u)" = 0 ]; then chown postgres "$DIR"; fi
if [ ! -f "$DIR/data/PG_VERSION" ]; then
    "${RUN[@]}" initdb -D "$DIR/data" -U postgres --auth=trust >/dev/null
fi
if ! "${RUN[@]}" pg_ctl -D "$DIR/data" status >/dev/null 2>&1; then
    "${RUN[@]}" pg_ctl -D "$DIR/data" -l "$DIR/server.log" -w \
        -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=200" start >&2
fi
if ! "${RUN[@]}" psql -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1; then
    "${RUN[@]}" createdb -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
fi
echo "postgresql+psycopg://postgres@127.0.0.1:$PORT/$DB"
