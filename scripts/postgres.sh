#!/usr/bin/env bash
# A throwaway PostgreSQL server for Lockstep's PostgreSQL tests and benches (docs/durable.md).
#
#   scripts/postgres.sh start   install PostgreSQL if missing (Debian: apt-get), create a new
#                               cluster in a temporary directory, start it on 127.0.0.1 on a
#                               free port, create the role and database `lockstep`, print the URL
#   scripts/postgres.sh url     print the URL of the running server (postgres://...)
#   scripts/postgres.sh stop    stop the server and delete its cluster
#   scripts/postgres.sh status  say whether it runs
#   scripts/postgres.sh restart      fast shutdown (every session is terminated, 57P01), then
#                                    start again on the same port with the same data
#   scripts/postgres.sh stop-keep    fast shutdown, keeping the cluster (the server is down
#                                    until start-again; `url` still prints its URL)
#   scripts/postgres.sh start-again  start the kept cluster again (same port, same options)
#
# restart, stop-keep and start-again are for the outage tests (docs/durable.md, "Outages"):
# they stop and start a cluster under running processes without deleting it. Give such a test
# its own cluster (LOCKSTEP_PG_STATE=DIR/pg.env), so that the shared server keeps running.
#
# The server's whereabouts are kept in target/postgres.env (one KEY=VALUE a line), so `url`
# and `stop` find the server that `start` made. The cluster lives in a fresh directory under
# $TMPDIR (not under the clone: the server runs as the `postgres` user, who may not be able to
# enter the clone's parent directories, e.g. /root). The server refuses to run as root, so as
# root every server command runs as the `postgres` user (created by Debian's package) through
# runuser; as another user it runs as that user.
#
# The cluster is for tests: it listens on loopback only, and it runs with
# `synchronous_commit = off` (a crash of the server may lose the last few commits, never
# corrupt the database; fsync stays on). Environment:
#   LOCKSTEP_PG_PORT   port to use instead of a free one picked at random
#   LOCKSTEP_PG_STATE  state file (default target/postgres.env)
set -euo pipefail
cd "$(dirname "$0")/.."

state=${LOCKSTEP_PG_STATE:-target/postgres.env}

die() {
    echo "postgres.sh: $*" >&2
    exit 1
}

# The directory of the newest installed server binaries (Debian keeps them out of PATH).
pg_bindir() {
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [[ -n $dir && -x $dir/initdb ]]; then
        echo "$dir"
        return
    fi
    if command -v pg_config >/dev/null && [[ -x $(pg_config --bindir)/initdb ]]; then
        pg_config --bindir
        return
    fi
    if command -v initdb >/dev/null; then
        dirname "$(command -v initdb)"
        return
    fi
    return 1
}

install_postgres() {
    if pg_bindir >/dev/null; then
        return
    fi
    echo "postgres.sh: PostgreSQL not found; installing Debian's package" >&2
    local sudo=()
    if [[ $(id -u) != 0 ]]; then
        command -v sudo >/dev/null || die "PostgreSQL is not installed and we are not root (install the postgresql package)"
        sudo=(sudo)
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    # The package's post-install script creates and may start Debian's own cluster
    # (main, port 5432); we neither use nor stop it.
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
    pg_bindir >/dev/null || die "apt-get installed postgresql but no initdb was found"
}

# Run a command as the user that owns the cluster.
as_owner() {
    if [[ $(id -u) == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# Is something listening on 127.0.0.1:$1?
port_busy() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

load_state() {
    [[ -f $state ]] || return 1
    # shellcheck disable=SC1090
    source "$state"
}

start() {
    if load_state && [[ -d ${PGDATA_DIR:-} ]]; then
        if as_owner "$BINDIR/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1; then
            echo "$URL"
            return
        fi
        echo "postgres.sh: removing the stale cluster of a previous start ($PGDATA_DIR)" >&2
        rm -rf "$BASE_DIR"
    fi
    install_postgres
    local bindir base data port tries=0
    bindir=$(pg_bindir)
    if [[ $(id -u) == 0 ]] && ! id postgres >/dev/null 2>&1; then
        die "running as root but there is no postgres user to run the server as"
    fi
    base=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-pg.XXXXXX")
    data=$base/data
    chmod 755 "$base"
    if [[ $(id -u) == 0 ]]; then
        chown postgres: "$base"
    fi
    as_owner "$bindir/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        -E UTF8 --locale=C.UTF-8 >"$base/initdb.log" 2>&1 ||
        { cat "$base/initdb.log" >&2; rm -rf "$base"; die "initdb failed"; }
    # pg_stat_statements (PostgreSQL's contrib, in Debian's server package) lets the
    # benches count the statements each operation sends (docs/durable.md).
    local preload=""
    if [[ -e $bindir/../lib/pg_stat_statements.so ]]; then
        preload="-c shared_preload_libraries=pg_stat_statements"
    fi
    local opts
    while :; do
        port=${LOCKSTEP_PG_PORT:-$((20000 + RANDOM % 30000))}
        tries=$((tries + 1))
        opts="-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$base -c synchronous_commit=off -c max_connections=200 $preload"
        if ! port_busy "$port" &&
            as_owner "$bindir/pg_ctl" -D "$data" -l "$base/server.log" -w -t 60 \
                -o "$opts" start >/dev/null; then
            break
        fi
        if [[ -n ${LOCKSTEP_PG_PORT:-} || $tries -ge 10 ]]; then
            cat "$base/server.log" >&2 || true
            rm -rf "$base"
            die "could not start the server (last port tried: $port)"
        fi
    done
    # The test role may create databases and schemas (a fresh one per test case).
    as_owner "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$base" -p "$port" -U postgres -d postgres \
        -c "CREATE ROLE lockstep LOGIN CREATEDB PASSWORD 'lockstep'" \
        -c "CREATE DATABASE lockstep OWNER lockstep" >/dev/null
    if [[ -n $preload ]]; then
        as_owner "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$base" -p "$port" -U postgres -d lockstep \
            -c "CREATE EXTENSION pg_stat_statements" \
            -c "GRANT pg_read_all_stats TO lockstep" \
            -c "GRANT EXECUTE ON FUNCTION pg_stat_statements_reset TO lockstep" >/dev/null
    fi
    local url="postgres://lockstep:lockstep@127.0.0.1:$port/lockstep"
    mkdir -p "$(dirname "$state")"
    cat >"$state" <<EOF
BINDIR=$bindir
BASE_DIR=$base
PGDATA_DIR=$data
PORT=$port
URL=$url
OPTS="$opts"
EOF
    echo "$url"
}

stop() {
    if ! load_state; then
        echo "postgres.sh: no server recorded in $state; nothing to stop" >&2
        return
    fi
    if [[ -d $PGDATA_DIR ]]; then
        as_owner "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t 60 stop >/dev/null 2>&1 || true
    fi
    rm -rf "$BASE_DIR"
    rm -f "$state"
}

# A fast shutdown of the recorded cluster, keeping its data directory.
stop_keep() {
    load_state || die "no server recorded in $state (run: scripts/postgres.sh start)"
    [[ -d $PGDATA_DIR ]] || die "the cluster $PGDATA_DIR is gone"
    as_owner "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t 60 stop >/dev/null
}

# Starts the recorded cluster again with the options and port of its first start.
start_again() {
    load_state || die "no server recorded in $state (run: scripts/postgres.sh start)"
    [[ -d $PGDATA_DIR ]] || die "the cluster $PGDATA_DIR is gone"
    [[ -n ${OPTS:-} ]] || die "$state records no server options (written by an older postgres.sh: run stop, then start)"
    if as_owner "$BINDIR/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1; then
        echo "$URL"
        return
    fi
    as_owner "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$BASE_DIR/server.log" -w -t 60 \
        -o "$OPTS" start >/dev/null ||
        { tail -n 20 "$BASE_DIR/server.log" >&2 || true; die "could not start the cluster again (port $PORT)"; }
    echo "$URL"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
stop-keep) stop_keep ;;
start-again) start_again ;;
restart)
    stop_keep
    start_again
    ;;
url)
    load_state || die "no server recorded in $state (run: scripts/postgres.sh start)"
    echo "$URL"
    ;;
status)
    if load_state && as_owner "$BINDIR/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1; then
        echo "running: $URL"
    else
        echo "not running"
        exit 3
    fi
    ;;
*)
    echo "usage: scripts/postgres.sh start|stop|url|status|restart|stop-keep|start-again" >&2
    exit 2
    ;;
esac
