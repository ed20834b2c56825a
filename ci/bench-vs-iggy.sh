#!/usr/bin/env bash
# Vireo and the reference server side by side, by the reference's own bench and by ours, in one run
# on this machine. Not part of CI (it takes 10 to 20 minutes and wants the machine to itself).
#   ci/bench-vs-iggy.sh [IGGY_BIN]
# IGGY_BIN: a directory holding `iggy-server` and `iggy-bench` built from apache/iggy at tag
# server-0.9.0-edge.5; by default ../shared/iggy-bin beside this checkout, where they are prebuilt.
# They need libhwloc15 at run time: the script installs it (apt-get) when `ldd` says it is missing.
# This script does not build them: no recipe for building the reference lives in this repository.
# WORKLOADS (default: all five) picks some of them by name, e.g. WORKLOADS="pinned-producer";
# CLUSTER=0 skips the three-node runs and CROSS=0 the vireo-bench rounds; WORKLOADS="" runs only the
# clusters. CLUSTER_WORKLOADS (default "pinned-producer end-to-end", 500 MB each) picks the cluster
# workloads, CLUSTER_THROUGH=N (default 0) the node the bench talks to, and CLUSTER_METRICS=1
# keeps each Vireo node's /metrics after a cluster round.
# COUNTS=1 counts, over each measured round, the server's syscalls and io_uring submissions with
# `perf` tracepoints (root): io_uring_enter, SQEs and SQEs by opcode, pwritev/pwrite64, membarrier,
# fdatasync/fsync (syscalls; an io_uring FSYNC is counted by its opcode), per GB the bench moved.
# WARM_PAGES=1 turns the VM's free page reporting off for the run (and back on at exit): with it
# on, memory the guest freed goes back to the host within seconds, and the next write into the
# page cache faults every page in again, about ten times the cost of a warm copy (1 GB: 2 s of
# system time against 0.2 s here). Both servers pay it for each page they write, and the figures
# swing between rounds with how much of the memory they get is cold.
#
# For each workload of the performance issue: three rounds, alternating iggy-server and
# vireo-server, each on a fresh data directory with the same shard count (SHARDS, default 2),
# pinned one shard per core; each round measured by iggy-bench. Then one round of vireo-bench
# against each server, to show the two benches agree. Then the reference's three-node cluster
# (its default config with [cluster] on and a roster of three nodes on 127.0.0.1, `--replica-id N`)
# and a three-node vireo cluster, one shard per node on core N % cores, alternating rounds, with
# each node's CPU and the loopback's bytes per GB sent. Prints one table: both sides' median MB/s, P50, P99 and
# P999 (ms), peak RSS (MB, the server's VmHWM) and the server's CPU seconds (user + system, from
# /proc, over the measured bench alone) per GB the bench moved, and the ratios (MB/s: vireo /
# iggy; latency: iggy / vireo, so above 1 is Vireo ahead on both). Raw outputs go to
# target/bench-vs-iggy/.
set -euo pipefail
[ $# -le 1 ] || { echo "usage: $0 [IGGY_BIN] (a directory with iggy-server and iggy-bench of server-0.9.0-edge.5)"; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
iggy_bin=${1:-$root/../shared/iggy-bin}
[ -d "$iggy_bin" ] || { echo "$iggy_bin: no such directory (pass IGGY_BIN)"; exit 2; }
iggy_bin=$(cd "$iggy_bin" && pwd)
for binary in iggy-server iggy-bench; do
    [ -x "$iggy_bin/$binary" ] || { echo "$iggy_bin/$binary: not an executable"; exit 2; }
done
if ldd "$iggy_bin/iggy-server" | grep -q "not found"; then
    echo "iggy-server misses a library ($(ldd "$iggy_bin/iggy-server" | awk '/not found/ { print $1 }' | xargs)): installing libhwloc15"
    if [ "$(id -u)" -eq 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
    "${apt_get[@]}" install -y libhwloc15 >/dev/null 2>&1 || { "${apt_get[@]}" update >/dev/null && "${apt_get[@]}" install -y libhwloc15 >/dev/null; }
    if ldd "$iggy_bin/iggy-server" | grep -q "not found"; then
        echo "iggy-server still misses: $(ldd "$iggy_bin/iggy-server" | grep "not found")"
        exit 2
    fi
fi
shards=${SHARDS:-2}
rounds=${ROUNDS:-3}
out="$root/target/bench-vs-iggy"
rm -rf "$out" && mkdir -p "$out"
(cd "$root" && cargo build --release -p vireo-node --bin vireo-server --bin vireo-bench --bin vireo-cluster)
# SERVER_BUILD: another vireo-server binary to measure (an earlier build, for before and after).
vireo_server="${SERVER_BUILD:-$root/target/release/vireo-server}"
vireo_bench="$root/target/release/vireo-bench"

common="-m 1000 -P 250"
all_names=(pinned-producer pinned-consumer balanced-producer end-to-end fsync-producer)
read -r -a names <<<"${WORKLOADS-${all_names[*]}}"
declare -A workload=(
    [pinned-producer]="-T 1GB pinned-producer -s 2 -p 2"
    [pinned-consumer]="-T 1GB pinned-consumer -s 2 -c 2"
    [balanced-producer]="-T 1GB balanced-producer -p 4 -a 8"
    [end-to-end]="-T 500MB end-to-end-producing-consumer -s 2 -p 2"
    [fsync-producer]="-T 500MB --enforce-fsync pinned-producer -s 2 -p 2"
)
# The gigabytes each workload moves (iggy-bench's sizes are decimal), for CPU seconds per GB.
declare -A gigabytes=(
    [pinned-producer]=1 [pinned-consumer]=1 [balanced-producer]=1 [end-to-end]=0.5 [fsync-producer]=0.5
)
for name in "${names[@]}"; do
    [ -n "${workload[$name]:-}" ] || { echo "unknown workload $name (one of: ${all_names[*]})"; exit 2; }
done
# What the pinned consumer reads: a producer run on the same fresh server first, not measured.
fill="-T 1GB pinned-producer -s 2 -p 2"

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

server_pid=""
server_dir=""
stop_server() {
    if [ -n "$server_pid" ]; then
        kill -TERM "$server_pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    server_pid=""
    [ -n "$server_dir" ] && rm -rf "$server_dir"
    server_dir=""
}
reporting=/sys/module/page_reporting/parameters/page_reporting_order
reporting_was=""
finish() {
    stop_server
    if declare -F cluster_stop >/dev/null; then cluster_stop; fi
    if [ -n "$reporting_was" ]; then echo "$reporting_was" >"$reporting" || true; fi
}
trap finish EXIT
if [ -w "$reporting" ] && [ -d /sys/bus/virtio/drivers/virtio_balloon ]; then
    if [ "${WARM_PAGES:-0}" = 1 ]; then
        reporting_was=$(cat "$reporting")
        # An order above the largest free block: no block is ever reported.
        echo 11 >"$reporting"
        echo "free page reporting off for this run (page_reporting_order $reporting_was -> 11, restored at exit)"
    elif [ "$(cat "$reporting")" -le 10 ]; then
        echo "note: free page reporting is on (page_reporting_order $(cat "$reporting")): page-cache writes into memory the host took back cost about ten times a warm copy, and figures swing between rounds; WARM_PAGES=1 turns it off for the run"
    fi
fi

# start_server SIDE: a fresh data directory, a free port; sets server_pid and port.
start_server() {
    local side=$1
    server_dir=$(mktemp -d -p "$out" "$side-XXXX")
    port=$(free_port)
    if [ "$side" = iggy ]; then
        # The reference writes its logs and data under its working directory's system path.
        (cd "$server_dir" && IGGY_SYSTEM_PATH="$server_dir/data" IGGY_TCP_ADDRESS="127.0.0.1:$port" \
            IGGY_HTTP_ENABLED=false IGGY_QUIC_ENABLED=false IGGY_WEBSOCKET_ENABLED=false \
            IGGY_SYSTEM_SHARDING_CPU_ALLOCATION="$shards" IGGY_ROOT_USERNAME=iggy IGGY_ROOT_PASSWORD=iggy \
            exec "$iggy_bin/iggy-server" --with-default-root-credentials) >"$server_dir.log" 2>&1 &
    else
        VIREO_SYSTEM_PATH="$server_dir/data" VIREO_TCP_ADDRESS="127.0.0.1:$port" VIREO_HTTP_ENABLED=false \
            VIREO_SYSTEM_SHARDING_CPU_ALLOCATION="$shards" \
            "$vireo_server" --with-default-root-credentials >"$server_dir.log" 2>&1 &
    fi
    server_pid=$!
    for _ in $(seq 1 200); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        kill -0 "$server_pid" 2>/dev/null || { cat "$server_dir.log"; echo "$side server exited"; exit 1; }
        sleep 0.1
    done
    cat "$server_dir.log"
    echo "$side server did not listen on $port"
    exit 1
}

# cpu_seconds: the server's user + system CPU seconds so far.
cpu_seconds() {
    awk -v tick="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / tick }' "/proc/$server_pid/stat" 2>/dev/null || echo 0
}

peak_rss_mb() {
    awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$server_pid/status" 2>/dev/null || echo 0
}

# iggy_bench_figures FILE: "MB/s P50 P99 P999" from iggy-bench's results line.
iggy_bench_figures() {
    local line
    line=$(grep -a "Results: Total throughput" "$1" | tail -1)
    [ -n "$line" ] || { echo "no results in $1:"; tail -20 "$1"; return 1; }
    echo "$line" | sed -E 's/.*Total throughput: ([0-9.]+) MB\/s.* p50 latency: ([0-9.]+) ms.* p99 latency: ([0-9.]+) ms, p999 latency: ([0-9.]+) ms.*/\1 \2 \3 \4/'
}

# vireo_bench_figures FILE: "MB/s P50 P99 P999" from vireo-bench's total row.
vireo_bench_figures() {
    awk '$1 == "total" && NF == 10 { print $2, $4, $6, $7 }' "$1"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# alternate RUN NAME...: each workload's rounds, both servers in each, the one that goes first
# taking turns (RUN SIDE NAME ROUND measures one).
alternate() {
    local run=$1 name round order side
    shift
    for name in "$@"; do
        for round in $(seq 1 "$rounds"); do
            if [ $((round % 2)) -eq 1 ]; then order="iggy vireo"; else order="vireo iggy"; fi
            for side in $order; do "$run" "$side" "$name" "$round"; done
        done
    done
}

# medians RESULTS MEDIANS NAME FIELDS: MEDIANS[SIDE.FIELD] = the median over the rounds of field
# FIELD (1 to FIELDS) of RESULTS[NAME.SIDE.ROUND], both sides.
medians() {
    local -n results=$1 into=$2
    local name=$3 fields=$4 side field round values
    for side in iggy vireo; do
        for field in $(seq 1 "$fields"); do
            values=()
            for round in $(seq 1 "$rounds"); do
                values+=("$(echo "${results[$name.$side.$round]}" | cut -d' ' -f"$field")")
            done
            into[$side.$field]=$(median "${values[@]}")
        done
    done
}

# counts_start LOG / counts_stop LOG GB LABEL: perf on the server over one measured bench (COUNTS=1).
count_events=syscalls:sys_enter_io_uring_enter,io_uring:io_uring_submit_req,syscalls:sys_enter_pwritev,syscalls:sys_enter_pwrite64,syscalls:sys_enter_membarrier,syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync
counts_pids=()
counts_start() {
    perf stat -x, -o "$1.stat" -e "$count_events" -p "$server_pid" >/dev/null 2>&1 &
    counts_pids=($!)
    perf record -q -e io_uring:io_uring_submit_req -p "$server_pid" -o "$1.perf" >/dev/null 2>&1 &
    counts_pids+=($!)
    sleep 0.5
}
counts_stop() {
    local log=$1 gb=$2 label=$3 pid
    for pid in "${counts_pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
    for pid in "${counts_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    local totals opcodes
    totals=$(awk -F, -v gb="$gb" '$3 ~ /:/ { n = $3; sub(/.*:(sys_enter_)?(io_uring_)?/, "", n); printf "%s %.0f, ", n, $1 / gb }' "$log.stat")
    opcodes=$(perf script -i "$log.perf" -F trace 2>/dev/null \
        | sed -nE 's/.*opcode ([A-Z_0-9]+),.*/\1/p' | sort | uniq -c | sort -rn \
        | awk -v gb="$gb" '{ printf "%s %.0f, ", $2, $1 / gb }')
    echo "$label per GB: ${totals%, }"
    echo "$label SQEs per GB by opcode: ${opcodes%, }"
}

# measure SIDE NAME ROUND: one iggy-bench round against a fresh server of SIDE.
declare -A figures
measure() {
    local side=$1 name=$2 round=$3 log="$out/$2.$1.$3.log"
    start_server "$side"
    if [ "$name" = pinned-consumer ]; then
        # shellcheck disable=SC2086
        "$iggy_bin/iggy-bench" $common $fill tcp --server-address "127.0.0.1:$port" >"$log.fill" 2>&1
    fi
    local cpu_before cpu_after
    [ "${COUNTS:-0}" = 1 ] && counts_start "$log"
    cpu_before=$(cpu_seconds)
    # shellcheck disable=SC2086
    timeout 600 "$iggy_bin/iggy-bench" $common ${workload[$name]} tcp --server-address "127.0.0.1:$port" >"$log" 2>&1 || true
    cpu_after=$(cpu_seconds)
    [ "${COUNTS:-0}" = 1 ] && counts_stop "$log" "${gigabytes[$name]}" "  $name $side round $round"
    local rss cpu_per_gb
    rss=$(peak_rss_mb)
    cpu_per_gb=$(awk -v a="$cpu_before" -v b="$cpu_after" -v gb="${gigabytes[$name]}" 'BEGIN { printf "%.2f", (b - a) / gb }')
    stop_server
    local measured
    measured=$(iggy_bench_figures "$log") || { echo "$measured"; exit 1; }
    figures[$name.$side.$round]="$measured $rss $cpu_per_gb"
    echo "  $name $side round $round: $measured (MB/s P50 P99 P999), peak RSS $rss MB, $cpu_per_gb CPU-s/GB"
}

# cross NAME SIDE: one vireo-bench round against a fresh server of SIDE.
declare -A cross_figures
cross() {
    local name=$1 side=$2 log="$out/$1.$2.vireo-bench.log"
    start_server "$side"
    if [ "$name" = pinned-consumer ]; then
        # shellcheck disable=SC2086
        "$vireo_bench" $common $fill tcp --server-address "127.0.0.1:$port" >"$log.fill" 2>&1
    fi
    # shellcheck disable=SC2086
    timeout 600 "$vireo_bench" $common ${workload[$name]} tcp --server-address "127.0.0.1:$port" >"$log" 2>&1 || true
    stop_server
    cross_figures[$name.$side]=$(vireo_bench_figures "$log")
    [ -n "${cross_figures[$name.$side]}" ] || { echo "vireo-bench gave no total:"; tail -5 "$log"; exit 1; }
    echo "  $name vireo-bench against $side: ${cross_figures[$name.$side]} (MB/s P50 P99 P999)"
}

echo "== iggy-bench, $rounds rounds alternating, $shards shards, fresh data directories"
alternate measure "${names[@]}"

if [ "${CROSS:-1}" != 0 ]; then
    echo "== vireo-bench against both servers"
    for name in "${names[@]}"; do
        for side in iggy vireo; do cross "$name" "$side"; done
    done
fi

# ---- Three-node clusters: the reference's and Vireo's, on this machine, one shard per node.
# Both sides start three server processes on 127.0.0.1 with one shard each, node N on core N % cores
# (as vireo-cluster places them), and the bench talks to one node (CLUSTER_THROUGH, default 0).
# Measured per round: MB/s and latency, each node's CPU seconds per GB sent, and the bytes the
# loopback carried per GB sent (client and replica links together: /sys/class/net/lo tx_bytes).
cluster_pids=()
cluster_dir=""
cluster_addresses=()
cluster_stop() {
    local pid
    for pid in "${cluster_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${cluster_pids[@]}"; do
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    cluster_pids=()
    [ -n "$cluster_dir" ] && rm -rf "$cluster_dir"
    cluster_dir=""
}
# iggy_cluster_configs DIR PORTS...: node-N.toml for N in 0..2, from the reference's default config
# with [cluster] on and a roster of three nodes on 127.0.0.1 (5 ports each: tcp, quic, http,
# websocket, tcp_replica).
iggy_cluster_configs() {
    python3 - "$iggy_bin/config.toml" "$@" <<'PYTHON'
import re, sys
template, directory, ports = open(sys.argv[1]).read(), sys.argv[2], [int(p) for p in sys.argv[3:]]
# Drop the sample roster; turn the cluster on.
text = re.sub(r'(?m)^\[\[cluster\.nodes\]\]\n(?:(?!\[).*\n)*', '', template)
text = re.sub(r'(?m)^(\[cluster\]\n(?:.*\n)*?)enabled = false', r'\1enabled = true', text, count=1)
roster = ''
for node in range(3):
    tcp, quic, http, websocket, replica = ports[5 * node:5 * node + 5]
    roster += (f'[[cluster.nodes]]\nname = "iggy-node-{node}"\nip = "127.0.0.1"\nreplica_id = {node}\n'
               f'ports = {{ tcp = {tcp}, quic = {quic}, http = {http}, websocket = {websocket}, tcp_replica = {replica} }}\n\n')
# The roster goes where the sample was: before [system.sharding].
text = text.replace('[system.sharding]', roster + '[system.sharding]', 1)
for node in range(3):
    open(f'{directory}/node-{node}.toml', 'w').write(text)
PYTHON
}
# cluster_start SIDE: three fresh nodes; sets cluster_pids and cluster_addresses.
cluster_start() {
    local side=$1 node ports=() port
    cluster_dir=$(mktemp -d -p "$out" "cluster-$side-XXXX")
    cluster_addresses=()
    local cores
    cores=$(nproc)
    if [ "$side" = iggy ]; then
        for _ in $(seq 1 15); do ports+=("$(free_port)"); done
        iggy_cluster_configs "$cluster_dir" "${ports[@]}"
        for node in 0 1 2; do
            local core=$((node % cores))
            mkdir -p "$cluster_dir/node-$node"
            (cd "$cluster_dir/node-$node" && IGGY_CONFIG_PATH="$cluster_dir/node-$node.toml" \
                IGGY_SYSTEM_PATH="$cluster_dir/node-$node/data" \
                IGGY_SYSTEM_SHARDING_CPU_ALLOCATION="$core..$((core + 1))" \
                IGGY_ROOT_USERNAME=iggy IGGY_ROOT_PASSWORD=iggy \
                exec "$iggy_bin/iggy-server" --with-default-root-credentials --replica-id "$node") \
                >"$cluster_dir/node-$node.log" 2>&1 &
            cluster_pids+=($!)
            cluster_addresses+=("127.0.0.1:${ports[$((5 * node))]}")
        done
    else
        "$root/target/release/vireo-cluster" --nodes 3 --shards 1 --dir "$cluster_dir" --configs-only \
            >"$cluster_dir.configs" 2>&1
        for node in 0 1 2; do
            VIREO_SYSTEM_PATH="$cluster_dir/node-$node" "$vireo_server" --config "$cluster_dir/node-$node.toml" \
                --replica-id "$node" --with-default-root-credentials >"$cluster_dir/node-$node.log" 2>&1 &
            cluster_pids+=($!)
            cluster_addresses+=("$(sed -n "s/^node $node: clients \([0-9.:]*\),.*/\1/p" "$cluster_dir.configs")")
        done
    fi
    for node in 0 1 2; do
        port=${cluster_addresses[$node]##*:}
        for _ in $(seq 1 300); do
            if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
            kill -0 "${cluster_pids[$node]}" 2>/dev/null || { tail -20 "$cluster_dir/node-$node.log"; echo "$side node $node exited"; exit 1; }
            sleep 0.1
        done
    done
    # Every node linked to both peers (a frame to a peer not linked yet is dropped and repaired
    # later, which would leave a node out of the measured run) and taking clients.
    local ready
    for _ in $(seq 1 300); do
        ready=0
        for node in 0 1 2; do
            if [ "$side" = iggy ]; then
                grep -aq "replica mesh complete" "$cluster_dir/node-$node.log" && ready=$((ready + 1))
            elif grep -aq "accepting clients" "$cluster_dir/node-$node.log" \
                && [ "$(grep -ac "replica link up" "$cluster_dir/node-$node.log")" -ge 2 ]; then
                ready=$((ready + 1))
            fi
        done
        [ "$ready" = 3 ] && break
        sleep 0.1
    done
    [ "$ready" = 3 ] || echo "  note: only $ready of 3 $side nodes reported their links up"
    # Let the groups elect their primaries before the bench creates its streams.
    sleep 2
}
# cluster_measure SIDE NAME ROUND
declare -A cluster_results
cluster_measure() {
    local side=$1 name=$2 round=$3 log="$out/cluster.$2.$1.$3.log" through=${CLUSTER_THROUGH:-0}
    cluster_start "$side"
    local cpu_before=() cpu_after=() node lo_before lo_after
    for node in 0 1 2; do cpu_before+=("$(pid_cpu_seconds "${cluster_pids[$node]}")"); done
    lo_before=$(cat /sys/class/net/lo/statistics/tx_bytes)
    # shellcheck disable=SC2086
    timeout 600 "$iggy_bin/iggy-bench" $common ${cluster_workload[$name]} tcp \
        --server-address "${cluster_addresses[$through]}" >"$log" 2>&1 || true
    lo_after=$(cat /sys/class/net/lo/statistics/tx_bytes)
    for node in 0 1 2; do cpu_after+=("$(pid_cpu_seconds "${cluster_pids[$node]}")"); done
    local gb=${cluster_gigabytes[$name]} cpu=() measured
    for node in 0 1 2; do
        cpu+=("$(awk -v a="${cpu_before[$node]}" -v b="${cpu_after[$node]}" -v gb="$gb" 'BEGIN { printf "%.2f", (b - a) / gb }')")
    done
    local lo_per_gb
    lo_per_gb=$(awk -v a="$lo_before" -v b="$lo_after" -v gb="$gb" 'BEGIN { printf "%.2f", (b - a) / 1e9 / gb }')
    if [ "$side" = vireo ] && [ -n "${CLUSTER_METRICS:-}" ]; then
        for node in 0 1 2; do
            local http
            http=$(sed -n "s/^node $node: .*metrics http:\/\/\([0-9.:]*\)\/metrics.*/\1/p" "$cluster_dir.configs")
            curl -sf "http://$http/metrics" >"$log.metrics.$node" || true
        done
    fi
    cluster_stop
    measured=$(iggy_bench_figures "$log") || measured="0 0 0 0"
    cluster_results[$name.$side.$round]="$measured ${cpu[*]} $lo_per_gb"
    echo "  cluster $name $side round $round through node $through: $measured (MB/s P50 P99 P999), CPU-s/GB per node ${cpu[*]}, loopback GB per GB $lo_per_gb"
}
pid_cpu_seconds() {
    awk -v tick="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / tick }' "/proc/$1/stat" 2>/dev/null || echo 0
}
cluster_names=()
read -r -a cluster_names <<<"${CLUSTER_WORKLOADS:-pinned-producer end-to-end}"
declare -A cluster_workload=(
    [pinned-producer]="-T 500MB pinned-producer -s 2 -p 2"
    [end-to-end]="-T 500MB end-to-end-producing-consumer -s 2 -p 2"
    [balanced-producer]="-T 500MB balanced-producer -p 4 -a 8"
)
declare -A cluster_gigabytes=([pinned-producer]=0.5 [end-to-end]=0.5 [balanced-producer]=0.5)
for name in "${cluster_names[@]}"; do
    [ -n "${cluster_workload[$name]:-}" ] || { echo "unknown cluster workload $name (one of: ${!cluster_workload[*]})"; exit 2; }
done
if [ "${CLUSTER:-1}" != 0 ]; then
    echo "== three-node clusters (one shard per node), $rounds rounds alternating, through node ${CLUSTER_THROUGH:-0}"
    alternate cluster_measure "${cluster_names[@]}"
fi

echo
echo "Medians of $rounds rounds (iggy-bench $common, $shards shards, loopback TCP, $(nproc) cores):"
printf '%-18s | %9s %9s %7s | %7s %7s %7s | %7s %7s %7s | %8s %8s | %6s %6s | %10s %5s | %5s %5s\n' \
    workload "iggy MB/s" "vireo" ratio "iggy P50" vireo ratio "iggy P99" vireo ratio "iggy P999" vireo \
    "RSS i" "RSS v" "CPU-s/GB i" "v" "vb/ib i" "vb/ib v"
wins_12=0; wins_10=0; p99_ok=0
for name in "${names[@]}"; do
    unset med
    declare -A med
    medians figures med "$name" 6
    mbps_ratio=$(ratio "${med[vireo.1]}" "${med[iggy.1]}")
    agree_iggy="-"
    agree_vireo="-"
    if [ -n "${cross_figures[$name.iggy]:-}" ]; then
        agree_iggy=$(ratio "$(echo "${cross_figures[$name.iggy]}" | cut -d' ' -f1)" "${med[iggy.1]}")
        agree_vireo=$(ratio "$(echo "${cross_figures[$name.vireo]}" | cut -d' ' -f1)" "${med[vireo.1]}")
    fi
    printf '%-18s | %9s %9s %7s | %7s %7s %7s | %7s %7s %7s | %8s %8s | %6s %6s | %10s %5s | %7s %7s\n' "$name" \
        "${med[iggy.1]}" "${med[vireo.1]}" "$mbps_ratio" \
        "${med[iggy.2]}" "${med[vireo.2]}" "$(ratio "${med[iggy.2]}" "${med[vireo.2]}")" \
        "${med[iggy.3]}" "${med[vireo.3]}" "$(ratio "${med[iggy.3]}" "${med[vireo.3]}")" \
        "${med[iggy.4]}" "${med[vireo.4]}" "${med[iggy.5]}" "${med[vireo.5]}" "${med[iggy.6]}" "${med[vireo.6]}" \
        "$agree_iggy" "$agree_vireo"
    awk -v r="$mbps_ratio" 'BEGIN { exit !(r >= 1.2) }' && wins_12=$((wins_12 + 1))
    awk -v r="$mbps_ratio" 'BEGIN { exit !(r >= 1.0) }' && wins_10=$((wins_10 + 1))
    awk -v i="${med[iggy.3]}" -v v="${med[vireo.3]}" 'BEGIN { exit !(v <= i) }' && p99_ok=$((p99_ok + 1))
done
echo "CPU-s/GB: the server's user + system CPU seconds over the measured bench, per GB it moved."
echo "vb/ib: vireo-bench's MB/s over iggy-bench's median against the same server (agreement)."
echo "Vireo at least 1.2x on $wins_12 of ${#names[@]} workloads, at least 1.0x on $wins_10, P99 no worse on $p99_ok."

if [ "${CLUSTER:-1}" != 0 ]; then
    echo
    echo "Three-node clusters, medians of $rounds rounds (iggy-bench $common, one shard per node, through node ${CLUSTER_THROUGH:-0}):"
    printf '%-16s | %9s %9s %6s | %8s %8s %6s | %17s %17s | %9s %9s\n' workload "iggy MB/s" vireo ratio \
        "iggy P99" vireo ratio "CPU-s/GB iggy n0-2" "vireo n0-2" "lo GB/GB i" v
    for name in "${cluster_names[@]}"; do
        unset cmed
        declare -A cmed
        medians cluster_results cmed "$name" 8
        printf '%-16s | %9s %9s %6s | %8s %8s %6s | %17s %17s | %9s %9s\n' "$name" \
            "${cmed[iggy.1]}" "${cmed[vireo.1]}" "$(ratio "${cmed[vireo.1]}" "${cmed[iggy.1]}")" \
            "${cmed[iggy.3]}" "${cmed[vireo.3]}" "$(ratio "${cmed[iggy.3]}" "${cmed[vireo.3]}")" \
            "${cmed[iggy.5]}/${cmed[iggy.6]}/${cmed[iggy.7]}" "${cmed[vireo.5]}/${cmed[vireo.6]}/${cmed[vireo.7]}" \
            "${cmed[iggy.8]}" "${cmed[vireo.8]}"
    done
    echo "CPU-s/GB per node: each node's user + system CPU seconds over the bench, per GB sent;"
    echo "lo GB/GB: bytes the loopback carried (clients and replica links) per byte the bench sent."
fi
