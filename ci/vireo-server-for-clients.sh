# Sourced by the client scripts (ci/iggy-cli.sh, ci/iggy-bdd.sh, ci/node-sdk.sh): starts
# target/release/vireo-server with a fresh data directory on TCP_ADDRESS (default: a free
# loopback port), sets `address` (host:port) and `server` (the pid); `stop_vireo_server` stops it
# (SIGTERM) and removes the directory, as happens anyway when the script exits.
start_vireo_server() {
    local root=$1 tcp_address=${2:-127.0.0.1:0}
    vireo_data=$(mktemp -d)
    local log="$vireo_data/server.out"
    VIREO_SYSTEM_PATH="$vireo_data/data" VIREO_TCP_ADDRESS=$tcp_address VIREO_HTTP_ENABLED=false \
        "$root/target/release/vireo-server" --with-default-root-credentials >"$log" 2>&1 &
    server=$!
    trap stop_vireo_server EXIT
    address=""
    for _ in $(seq 1 100); do
        address=$(sed -n 's/^listening on \([0-9.:]*\) (tcp)$/\1/p' "$log")
        [ -n "$address" ] && return 0
        sleep 0.1
    done
    cat "$log"
    echo "vireo-server did not start"
    exit 1
}

stop_vireo_server() {
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -rf "$vireo_data"
}
