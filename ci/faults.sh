#!/usr/bin/env bash
# Faults of a real machine, tried on real processes with the published Iggy SDK as the client,
# and the table of what Vireo answered (issue 49): a full disk and a disk that fails (ext4 loop
# mounts the tests make: run as root), too many connections for `ulimit -n`, a 3-node cluster
# one of whose disks fails, and the memory an idle connection and a client that never reads
# cost (a release build, measured alone).
#
#   ci/faults.sh            # everything, then the table
#   SKIP_CLUSTER=1 ci/faults.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
    echo "ci/faults.sh mounts loop devices: run it as root" >&2
    exit 1
fi

out=target/faults
mkdir -p "$out"
tests=(--test server_disk_full --test server_failing_disk --test server_out_of_descriptors)
cargo test -p vireo-node "${tests[@]}" -- --nocapture --test-threads 1 2>&1 | tee "$out/single.txt" >/dev/null
if [ "${SKIP_CLUSTER:-0}" != 1 ]; then
    cargo test -p vireo-node --test cluster_faults g_three -- --nocapture 2>&1 | tee "$out/cluster.txt" >/dev/null
fi

# Idle connections in a release build, with nothing else going on: RSS before and after 1,000.
cargo build --release -p vireo-node --bin vireo-server 2>/dev/null
data=$(mktemp -d)
VIREO_SYSTEM_PATH="$data" VIREO_TCP_ADDRESS=127.0.0.1:0 VIREO_HTTP_ENABLED=false \
    ./target/release/vireo-server --with-default-root-credentials >"$out/memory-server.txt" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 1 300); do
    grep -q "^listening on" "$out/memory-server.txt" && break
    sleep 0.1
done
address=$(sed -n 's/^listening on \([^ ]*\) (tcp)$/\1/p' "$out/memory-server.txt" | head -1)
sleep 1
python3 - "$server" "$address" >"$out/memory.txt" <<'EOF'
import socket, sys, time
pid, address = int(sys.argv[1]), sys.argv[2]
host, port = address.rsplit(":", 1)
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
before = rss()
held = [socket.create_connection((host, int(port))) for _ in range(1000)]
time.sleep(2)
after = rss()
print(f"fault-table: memory: an idle connection costs {(after - before) / 1000 / 1e3:.1f} KB of RSS (1,000 held, release build)")
EOF
kill "$server"
wait "$server" 2>/dev/null || true

echo
echo "| fault | what Vireo answered |"
echo "|---|---|"
cat "$out"/single.txt "$out"/cluster.txt "$out"/memory.txt 2>/dev/null | sed -n 's/.*fault-table: //p' | while IFS= read -r line; do
    echo "| ${line%%: *} | ${line#*: } |"
done
grep -h "memory: RSS per idle" "$out/single.txt" 2>/dev/null || true
if grep -q "FAILED\|panicked" "$out"/single.txt "$out"/cluster.txt 2>/dev/null; then
    echo "a fault test failed: see $out/" >&2
    exit 1
fi
