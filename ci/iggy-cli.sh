#!/usr/bin/env bash
# The published iggy CLI (iggy-cli 0.14.0-edge.4, binary `iggy`) against vireo-server: creates,
# lists and deletes streams and topics, sends and polls messages. Not part of CI (installing the
# CLI takes about 6 to 10 minutes on 2 cores); run it by hand: `ci/iggy-cli.sh`.
# Starts its own server on a free loopback port with a fresh data directory; exits non-zero on the
# first command that fails, or if a listing or a poll does not show what was made.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v iggy >/dev/null || ! iggy --version | grep -q "0.14.0-edge.4"; then
    cargo install iggy-cli@0.14.0-edge.4 --locked
fi
cargo build --release -p vireo-node --bin vireo-server

root=$(pwd)
. "$root/ci/vireo-server-for-clients.sh"
start_vireo_server "$root"

run() {
    echo "\$ iggy $*"
    # The CLI warns that this machine has no keyring: noise, not part of the answer.
    iggy --tcp-server-address "$address" --username iggy --password iggy "$@" 2> >(grep -v keyring >&2)
}
expect() {
    local pattern=$1; shift
    local output
    output=$(run "$@")
    echo "$output"
    grep -q -- "$pattern" <<<"$output" || { echo "expected \`$pattern\` in the output of: iggy $*"; exit 1; }
}

run stream create orders
run stream create scratch
expect orders stream list
run topic create orders events 2 none
run topic create scratch tmp 1 none
expect events topic list orders
run message send orders events hello world
run message send --partition-id 1 orders events "to partition one"
expect hello message poll --offset 0 --message-count 2 orders events 0
expect world message poll --offset 0 --message-count 2 orders events 0
expect "to partition one" message poll --offset 0 --message-count 1 orders events 1
run topic delete scratch tmp
run stream delete scratch
output=$(run stream list)
echo "$output"
if grep -q scratch <<<"$output"; then echo "scratch was deleted but is listed"; exit 1; fi
echo "iggy CLI against vireo-server at $address: every command passed"
