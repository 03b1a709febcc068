#!/usr/bin/env bash
# PostgreSQL entrypoint compatible with the official postgres image as the chart uses it:
# on an empty $PGDATA it runs initdb (superuser $POSTGRES_USER, password $POSTGRES_PASSWORD),
# creates $POSTGRES_DB, runs /docker-entrypoint-initdb.d/* against a socket-only server,
# then execs postgres (listening on all addresses, password auth for TCP) as PID 1.
# Runs as the postgres user (uid 999); writes only $PGDATA, /var/run/postgresql and /tmp,
# so a read-only root file system works.
set -Eeuo pipefail

log() { printf '%s [entrypoint] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# `docker run IMAGE -c foo=bar` passes server options.
if [ "${1:-}" = "" ] || [ "${1:0:1}" = "-" ]; then
  set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
  exec "$@"
fi
[ "$(id -u)" != 0 ] || die "runs as the postgres user (uid 999), not root"

: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
export PGDATA POSTGRES_USER POSTGRES_DB

mkdir -p "$PGDATA"
chmod 0700 "$PGDATA" 2>/dev/null || true

run_init_file() {
  local f=$1
  case "$f" in
    *.sh)
      if [ -x "$f" ]; then
        log "running $f"; "$f"
      else
        log "sourcing $f"; # shellcheck disable=SC1090
        . "$f"
      fi
      ;;
    *.sql) log "running $f"; psql_init -f "$f" ;;
    *.sql.gz) log "running $f"; gunzip -c "$f" | psql_init ;;
    *) log "ignoring $f" ;;
  esac
}

psql_init() {
  psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password --username "$POSTGRES_USER" \
    --dbname "$POSTGRES_DB" "$@"
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
    die "the database is uninitialized and POSTGRES_PASSWORD is not set"
  fi
  log "initializing $PGDATA"
  # shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS is a word list, as in the official image
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
    --auth-local=trust --auth-host="$POSTGRES_HOST_AUTH_METHOD" \
    ${POSTGRES_INITDB_ARGS:-} >&2
  printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"

  # A temporary server on the socket only, for the database and the init scripts.
  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p ${PGPORT:-5432}" -w -t 60 start >&2
  export PGPASSWORD="${PGPASSWORD:-${POSTGRES_PASSWORD:-}}"
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password --username "$POSTGRES_USER" \
      --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";' >&2
  fi
  if [ -d /docker-entrypoint-initdb.d ]; then
    for f in /docker-entrypoint-initdb.d/*; do
      [ -e "$f" ] || continue
      run_init_file "$f"
    done
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop >&2
  unset PGPASSWORD
  log "initialized; starting the server"
fi

exec "$@"
