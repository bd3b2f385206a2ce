# Sourced by .ci/run: a real PostgreSQL server for the PostgreSQL tests, on 127.0.0.1 and a
# free port, in a temporary data folder owned by the postgres user, stopped when the script exits.

postgres_bin() {
    if command -v initdb >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
        return
    fi
    # Debian keeps the server binaries out of PATH, one folder per major version.
    find /usr/lib/postgresql -path '*/bin/initdb' 2>/dev/null | sort -V | tail -n 1 | xargs -r dirname
}

start_postgres() {
    local bin
    bin=$(postgres_bin)
    if [ -z "$bin" ]; then
        echo "== installing postgresql (Debian package)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq postgresql >/dev/null
        bin=$(postgres_bin)
    fi
    if [ -z "$bin" ]; then
        echo "PostgreSQL binaries (initdb, pg_ctl) are missing and could not be installed" >&2
        return 1
    fi
    local port
    port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    POSTGRES_DIR=$(mktemp -d)
    chown postgres:postgres "$POSTGRES_DIR"
    runuser -u postgres -- "$bin/initdb" -D "$POSTGRES_DIR/data" -U postgres --auth=trust \
        -E UTF8 --locale=C.UTF-8 --no-sync >"$POSTGRES_DIR/initdb.log" 2>&1 || {
        cat "$POSTGRES_DIR/initdb.log" >&2
        return 1
    }
    POSTGRES_BIN="$bin"
    runuser -u postgres -- "$bin/pg_ctl" -D "$POSTGRES_DIR/data" -l "$POSTGRES_DIR/server.log" -w -t 60 \
        -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$POSTGRES_DIR -c max_connections=300 -c fsync=off" \
        start >/dev/null || {
        echo "postgres did not start; log:" >&2
        cat "$POSTGRES_DIR/server.log" >&2
        return 1
    }
    export CONVMEM_POSTGRES_URL="postgresql://postgres@127.0.0.1:$port/postgres"
    echo "== postgres ($("$bin/postgres" --version)) on $CONVMEM_POSTGRES_URL"
}

stop_postgres() {
    if [ -n "${POSTGRES_DIR:-}" ] && [ -f "$POSTGRES_DIR/data/postmaster.pid" ]; then
        runuser -u postgres -- "$POSTGRES_BIN/pg_ctl" -D "$POSTGRES_DIR/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    if [ -n "${POSTGRES_DIR:-}" ]; then
        rm -rf "$POSTGRES_DIR"
    fi
}
