#!/usr/bin/env bash
# What CI runs, in order: formatting, lints, the README's test command, a simulator sweep.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "toolchain"
cargo --version
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add rustfmt clippy
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

step "cargo test"
cargo test

step "storage bench (a small run: it must work end to end)"
cargo build --release -p vireo-storage --bin vireo-storage-bench
./target/release/vireo-storage-bench --size-mib 64 --json --dir target/storage-bench

step "simulator sweep"
seeds="${VIREO_SWEEP_SEEDS:-2000}"
cargo build --release -p vireo-sim
./target/release/vireo-sim sweep --seeds "$seeds" | tee target/sweep.txt
grep -qx "$seeds passed, 0 failed" target/sweep.txt

step "streaming simulator sweep (whole clusters: nodes x shards, metadata and partition groups)"
streaming_seeds="${VIREO_STREAMING_SEEDS:-1000}"
./target/release/vireo-sim sweep --seeds "$streaming_seeds" --workload streaming | tee target/sweep-streaming.txt
grep -qx "$streaming_seeds passed, 0 failed" target/sweep-streaming.txt
