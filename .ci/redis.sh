# Sourced by .ci/run: a real Redis server for the Redis tests, on 127.0.0.1 and
# a free port, without persistence, stopped when the script exits.

start_redis() {
    if ! command -v redis-server >/dev/null 2>&1; then
        echo "== installing redis-server (Debian package)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq redis-server >/dev/null
    fi
    local port
    port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    REDIS_DIR=$(mktemp -d)
    redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
        --dir "$REDIS_DIR" --daemonize yes --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log"
    for _ in $(seq 1 50); do
        if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
            break
        fi
        sleep 0.1
    done
    if ! redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
        echo "redis-server did not start; log:" >&2
        cat "$REDIS_DIR/redis.log" >&2
        return 1
    fi
    export CONVMEM_REDIS_URL="redis://127.0.0.1:$port/0"
    echo "== redis-server on $CONVMEM_REDIS_URL"
    trap stop_redis EXIT
}

stop_redis() {
    if [ -n "${REDIS_DIR:-}" ] && [ -f "$REDIS_DIR/redis.pid" ]; then
        kill "$(cat "$REDIS_DIR/redis.pid")" 2>/dev/null || true
    fi
}
