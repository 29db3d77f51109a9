#!/usr/bin/env bash
# Make sure a PostgreSQL server runs for streamplane's tests (idempotent).
#
#   infra/postgres/ensure.sh start DIR PORT   # install if missing, initdb DIR, start on 127.0.0.1:PORT
#   infra/postgres/ensure.sh stop DIR         # stop the server of DIR (nothing running is fine)
#
# - The binaries come from Debian's packages: if no initdb/pg_ctl is found (on PATH or in
#   /usr/lib/postgresql/*/bin), `apt-get update && apt-get install -y postgresql` runs
#   (root needed, as on the project's machines).
# - PostgreSQL refuses to run as root. Run as root, the server runs as the `postgres`
#   user the package creates (or, if it is missing, a system user `streamplane-pg` made
#   here), through `runuser`; DIR is given to that user. Run as anyone else, the server
#   runs as that user.
# - The cluster has one role, `streamplane`, with trust authentication on loopback only,
#   and a database `streamplane`. The server listens on 127.0.0.1 only, its socket is in DIR.
# - On success the last line printed is the SQLAlchemy URL:
#   postgresql+psycopg://streamplane@127.0.0.1:PORT/streamplane
set -euo pipefail

die() { echo "error: $*" >&2; exit 1; }

find_bindir() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && { echo "$d"; return 0; }
    done
    if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"
        return 0
    fi
    return 1
}

ensure_binaries() {
    if ! BINDIR=$(find_bindir); then
        [[ $(id -u) -eq 0 ]] || die "PostgreSQL is not installed and installing needs root"
        echo "installing PostgreSQL from Debian's packages" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq postgresql >&2
        BINDIR=$(find_bindir) || die "PostgreSQL binaries not found after installing"
    fi
}

# as_user CMD...: run CMD as the server's user.
as_user() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u "$PGUSER_OS" -- "$@"
    else
        "$@"
    fi
}

pick_user() {
    if [[ $(id -u) -ne 0 ]]; then
        PGUSER_OS=$(id -un)
    elif id postgres >/dev/null 2>&1; then
        PGUSER_OS=postgres
    else
        id streamplane-pg >/dev/null 2>&1 ||
            useradd --system --no-create-home --shell /usr/sbin/nologin streamplane-pg
        PGUSER_OS=streamplane-pg
    fi
}

cmd=${1:-}
dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || die "usage: $0 start DIR PORT | stop DIR"
data="$dir/data"

case "$cmd" in
stop)
    [[ -f "$data/postmaster.pid" ]] || exit 0
    BINDIR=$(find_bindir) || exit 0
    pick_user
    as_user "$BINDIR/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
    ;;
start)
    port=${3:-}
    [[ "$port" =~ ^[0-9]+$ ]] || die "give a port: $0 start DIR PORT"
    ensure_binaries
    pick_user
    mkdir -p "$dir"
    if [[ $(id -u) -eq 0 ]]; then
        chown "$PGUSER_OS" "$dir"
    fi
    chmod 700 "$dir"
    if [[ ! -f "$data/PG_VERSION" ]]; then
        as_user "$BINDIR/initdb" -D "$data" -U streamplane --auth=trust -E UTF8 \
            --locale=C >"$dir/initdb.log" 2>&1 || die "initdb failed: see $dir/initdb.log"
    fi
    if ! as_user "$BINDIR/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        as_user "$BINDIR/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
            -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" \
            start >/dev/null || die "the server did not start: see $dir/server.log"
    fi
    if ! as_user "$BINDIR/psql" -h 127.0.0.1 -p "$port" -U streamplane -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = 'streamplane'" | grep -q 1; then
        as_user "$BINDIR/createdb" -h 127.0.0.1 -p "$port" -U streamplane streamplane
    fi
    echo "postgresql+psycopg://streamplane@127.0.0.1:$port/streamplane"
    ;;
*)
    die "unknown command $cmd: use start or stop"
    ;;
esac
