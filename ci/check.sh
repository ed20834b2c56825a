#!/usr/bin/env bash
# What CI runs, in order: formatting, lints, the README's test command, a simulator sweep.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# A clean clone builds once: incremental caches would only add gigabytes to its disk.
export CARGO_INCREMENTAL=0

step "toolchain"
cargo --version
df -h . | tail -1
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add rustfmt clippy
fi

# The README's HTTP quick start runs curl (node/tests/readme_curl.rs).
if ! command -v curl >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
    "${apt_get[@]}" install -y curl >/dev/null 2>&1 || { "${apt_get[@]}" update >/dev/null && "${apt_get[@]}" install -y curl >/dev/null; }
fi

# The fault tests make ext4 loop mounts (node/tests/loop_mount): mkfs.ext4, e2fsck, findmnt.
if ! command -v mkfs.ext4 >/dev/null 2>&1 || ! command -v e2fsck >/dev/null 2>&1 || ! command -v findmnt >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
    "${apt_get[@]}" install -y e2fsprogs util-linux >/dev/null 2>&1 || { "${apt_get[@]}" update >/dev/null && "${apt_get[@]}" install -y e2fsprogs util-linux >/dev/null; }
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

step "cargo test"
cargo test

step "the README's run command starts a server that the Iggy SDK's flow passes against"
rm -rf local_data
cargo build --release -p vireo-node --bin vireo-server
cargo run --release -p vireo-node --bin vireo-server -- --with-default-root-credentials >target/readme-server.log 2>&1 &
server=$!
for _ in $(seq 1 300); do
    grep -q "^listening on 127.0.0.1:8090 (tcp)" target/readme-server.log && break
    kill -0 $server 2>/dev/null || { cat target/readme-server.log; exit 1; }
    sleep 0.1
done
VIREO_SERVER_ADDRESS=127.0.0.1:8090 cargo test -p vireo-node --test server_sdk
kill -TERM $server
wait $server
grep -q "vireo-server stopped" target/readme-server.log
rm -rf local_data

step "storage bench (a small run: it must work end to end)"
cargo build --release -p vireo-storage --bin vireo-storage-bench
./target/release/vireo-storage-bench --size-mib 64 --json --dir target/storage-bench

step "simulator sweep"
seeds="${VIREO_SWEEP_SEEDS:-2000}"
cargo build --release -p vireo-sim
./target/release/vireo-sim sweep --seeds "$seeds" | tee target/sweep.txt
grep -qx "$seeds passed, 0 failed" target/sweep.txt

step "simulator sweep with disk loss (a replica restarts empty and rejoins)"
disk_loss_seeds="${VIREO_DISK_LOSS_SEEDS:-1000}"
./target/release/vireo-sim sweep --seeds "$disk_loss_seeds" --disk-loss | tee target/sweep-disk-loss.txt
grep -qx "$disk_loss_seeds passed, 0 failed" target/sweep-disk-loss.txt

step "streaming simulator sweep (whole clusters: nodes x shards, metadata and partition groups)"
streaming_seeds="${VIREO_STREAMING_SEEDS:-700}"
./target/release/vireo-sim sweep --seeds "$streaming_seeds" --workload streaming | tee target/sweep-streaming.txt
grep -qx "$streaming_seeds passed, 0 failed" target/sweep-streaming.txt

step "disk used by the build"
du -sh target
