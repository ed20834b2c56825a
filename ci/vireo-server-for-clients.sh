# Sourced by the client scripts (ci/iggy-cli.sh, ci/iggy-bdd.sh): starts target/release/vireo-server
# on a free loopback port with a fresh data directory, sets `address` (host:port) and `server` (the
# pid), and stops it (SIGTERM) and removes the directory when the script exits.
start_vireo_server() {
    local root=$1
    vireo_data=$(mktemp -d)
    local log="$vireo_data/server.out"
    VIREO_SYSTEM_PATH="$vireo_data/data" VIREO_TCP_ADDRESS=127.0.0.1:0 VIREO_HTTP_ENABLED=false \
        "$root/target/release/vireo-server" --with-default-root-credentials >"$log" 2>&1 &
    server=$!
    trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$vireo_data"' EXIT
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
