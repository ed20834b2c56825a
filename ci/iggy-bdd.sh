#!/usr/bin/env bash
# The reference's own cross-SDK scenarios (bdd/ in the Iggy source at tag server-0.9.0-edge.5,
# its Rust runner, unchanged) against vireo-server: the single-node features, basic messaging and
# raw commands (leader_redirection needs a cluster). Not part of CI: building the runner takes
# several minutes.
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
    cargo test --features bdd --test basic_messaging --test raw_command --no-run)

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
exit $status
