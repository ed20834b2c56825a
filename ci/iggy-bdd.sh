#!/usr/bin/env bash
# The reference's own cross-SDK scenarios (bdd/ in the Iggy source at tag server-0.9.0-edge.5,
# its Rust runner, unchanged) against vireo-server: the single-node features, basic messaging and
# raw commands, then leader_redirection against a two-node vireo cluster on the ports the feature
# names (leader 127.0.0.1:8091, follower 127.0.0.1:8092) and a single node on 127.0.0.1:8090.
# Not part of CI: building the runner takes several minutes.
#   ci/iggy-bdd.sh IGGY_SOURCE     IGGY_SOURCE: a git mirror or checkout of apache/iggy
# The tag's tree is exported once under target/iggy-bdd/src and built there (cached); the server
# runs on a free loopback port with a fresh data directory, and the runner finds it through
# IGGY_TCP_ADDRESS.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 IGGY_SOURCE (a git mirror or checkout of apache/iggy)"; exit 2; }
source=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
tag=server-0.9.0-edge.5
checkout="$root/target/iggy-bdd/src"
if [ ! -f "$checkout/bdd/rust/Cargo.toml" ]; then
    rm -rf "$checkout" && mkdir -p "$checkout"
    git -C "$source" archive "$tag" | tar -x -C "$checkout"
fi
(cd "$root" && cargo build --release -p vireo-node --bin vireo-server)
# The tag pins a newer toolchain (rust-toolchain.toml) than a machine may have: the runner is
# built with the one this project builds with.
export RUSTUP_TOOLCHAIN="${RUSTUP_TOOLCHAIN:-$(cd "$root" && rustup show active-toolchain | cut -d' ' -f1)}"
# Build the runner before the server starts, so the build's time is not the server's.
(cd "$checkout/bdd/rust" && CARGO_TARGET_DIR="$root/target/iggy-bdd/target" \
    cargo test --features bdd --test basic_messaging --test raw_command --test leader_redirection --no-run)

. "$root/ci/vireo-server-for-clients.sh"
start_vireo_server "$root"
echo "vireo-server at $address"
cd "$checkout/bdd/rust"
status=0
for feature in basic_messaging raw_command; do
    echo "== $feature"
    IGGY_TCP_ADDRESS=$address CARGO_TARGET_DIR="$root/target/iggy-bdd/target" \
        cargo test --features bdd --test "$feature" || status=1
done
kill -TERM $server 2>/dev/null || true
wait $server 2>/dev/null || true
rm -rf "$vireo_data"

# leader_redirection: node 0 of a two-node cluster is the metadata group's primary in view 0,
# so get_cluster_metadata names it the leader.
cluster_dir="$root/target/iggy-bdd/cluster"
rm -rf "$cluster_dir" && mkdir -p "$cluster_dir"
secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
for replica in 0 1; do
    cat >"$cluster_dir/node-$replica.toml" <<EOF
[system]
path = "$cluster_dir/node-$replica"
[system.sharding]
cpu_allocation = "$replica..$((replica + 1))"
[http]
enabled = false
[cluster]
enabled = true
name = "bdd"
replica_id = $replica
[[cluster.nodes]]
name = "leader"
ip = "127.0.0.1"
replica_id = 0
ports = { tcp = 8091, quic = 8081, http = 3001, websocket = 8071, tcp_replica = 19091 }
[[cluster.nodes]]
name = "follower"
ip = "127.0.0.1"
replica_id = 1
ports = { tcp = 8092, quic = 8082, http = 3002, websocket = 8072, tcp_replica = 19092 }
[cluster.auth]
secret = "$secret"
EOF
    "$root/target/release/vireo-server" --config "$cluster_dir/node-$replica.toml" --with-default-root-credentials \
        >"$cluster_dir/node-$replica.log" 2>&1 </dev/null &
    pids+=($!)
done
VIREO_SYSTEM_PATH="$cluster_dir/single" VIREO_HTTP_ENABLED=false "$root/target/release/vireo-server" \
    --with-default-root-credentials >"$cluster_dir/single.log" 2>&1 </dev/null &
pids+=($!)
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
    grep -q "accepting clients" "$cluster_dir/node-0.log" 2>/dev/null &&
        grep -q "^listening on 127.0.0.1:8090" "$cluster_dir/single.log" 2>/dev/null && break
    sleep 0.1
done
echo "== leader_redirection (a vireo cluster on 127.0.0.1:8091 and :8092; a single node on :8090)"
IGGY_TCP_ADDRESS_LEADER=127.0.0.1:8091 IGGY_TCP_ADDRESS_FOLLOWER=127.0.0.1:8092 IGGY_TCP_ADDRESS=127.0.0.1:8090 \
    CARGO_TARGET_DIR="$root/target/iggy-bdd/target" cargo test --features bdd --test leader_redirection || status=1
exit $status
