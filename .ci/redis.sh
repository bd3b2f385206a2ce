# Sourced by .ci/run: real Redis servers for the Redis tests, on 127.0.0.1 and free ports,
# without persistence, stopped when the script exits:
#   start_redis          one server          -> CONVMEM_REDIS_URL
#   start_redis_cluster  a 3-master Cluster  -> CONVMEM_REDIS_CLUSTER_URL
# (joined with redis-cli --cluster create; each node's bus port is given explicitly,
# since port + 10000 does not exist for a high free port).

free_port() {
    python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

install_redis() {
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        echo "== installing redis-server (Debian package)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq redis-server >/dev/null
    fi
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        echo "redis-server and redis-cli are missing and could not be installed" >&2
        return 1
    fi
}

# launch_redis DIR PORT [extra redis-server options...]
launch_redis() {
    local dir=$1 port=$2
    shift 2
    mkdir -p "$dir"
    redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
        --dir "$dir" --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" "$@"
    for _ in $(seq 1 50); do
        if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
            return 0
        fi
        sleep 0.1
    done
    echo "redis-server on port $port did not start; log:" >&2
    cat "$dir/redis.log" >&2
    return 1
}

start_redis() {
    install_redis
    REDIS_DIR=$(mktemp -d)
    local port
    port=$(free_port)
    launch_redis "$REDIS_DIR/single" "$port"
    export CONVMEM_REDIS_URL="redis://127.0.0.1:$port/0"
    echo "== redis-server on $CONVMEM_REDIS_URL"
}

start_redis_cluster() {
    install_redis
    REDIS_CLUSTER_DIR=$(mktemp -d)
    local nodes=() port
    for index in 1 2 3; do
        port=$(free_port)
        launch_redis "$REDIS_CLUSTER_DIR/node$index" "$port" --cluster-enabled yes \
            --cluster-config-file nodes.conf --cluster-port "$(free_port)" --cluster-node-timeout 5000
        nodes+=("127.0.0.1:$port")
    done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$REDIS_CLUSTER_DIR/create.log" 2>&1 || {
        cat "$REDIS_CLUSTER_DIR/create.log" >&2
        return 1
    }
    for _ in $(seq 1 100); do
        local ok=0
        for node in "${nodes[@]}"; do
            if redis-cli -h 127.0.0.1 -p "${node##*:}" cluster info 2>/dev/null | grep -q "cluster_state:ok"; then
                ok=$((ok + 1))
            fi
        done
        if [ "$ok" -eq 3 ]; then
            export CONVMEM_REDIS_CLUSTER_URL="redis://${nodes[0]}"
            echo "== redis cluster of 3 masters at ${nodes[*]}"
            return 0
        fi
        sleep 0.1
    done
    echo "the Redis Cluster did not reach cluster_state:ok" >&2
    return 1
}

stop_redis() {
    local dir
    for dir in "${REDIS_DIR:-}" "${REDIS_CLUSTER_DIR:-}"; do
        if [ -n "$dir" ]; then
            for pidfile in "$dir"/*/redis.pid; do
                if [ -f "$pidfile" ]; then
                    kill "$(cat "$pidfile")" 2>/dev/null || true
                fi
            done
            rm -rf "$dir"
        fi
    done
}
