#!/usr/bin/env bash
# Starts N `folio serve` replicas on loopback, each publishing KV-cache events, and
# vllm-router in front of them.
#
#   scripts/cluster.sh N [POLICY] [-- COMMAND ...]
#
# POLICY is a vllm-router policy (default kv_aware; round_robin, cache_aware, ...). With
# kv_aware the router subscribes to every replica's events (--kv-event-source). Without
# COMMAND the cluster runs until Ctrl-C; with one, it runs COMMAND once everything
# answers, then stops the cluster and exits with COMMAND's status. COMMAND sees
# FOLIO_ROUTER_URL (http://127.0.0.1:PORT) and FOLIO_REPLICA_URLS (comma-separated).
#
# Environment: FOLIO_BIN (default target/release/folio), FOLIO_CLUSTER_PORT (router
# port, default 18100; replica i listens on PORT+1+i, its events on PORT+101+i),
# FOLIO_SERVE_ARGS (extra `folio serve` flags, e.g. "--kv-cache-bytes 512m"; without a
# --threads there, each replica gets --threads max(1, cores / N): replicas whose compute
# threads outnumber the cores spin on threads the scheduler has parked),
# FOLIO_ROUTER_ARGS (extra vllm-router flags, e.g. "--log-level debug"),
# FOLIO_CLUSTER_LOGS (log directory, default target/cluster). vllm-router is installed
# from PyPI (python3 -m pip install vllm-router) when it is not on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:?usage: scripts/cluster.sh N [POLICY] [-- COMMAND ...]}
shift
policy=kv_aware
if [[ $# -gt 0 && $1 != "--" ]]; then
  policy=$1
  shift
fi
[[ $# -gt 0 && $1 == "--" ]] && shift
if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
  echo "cluster.sh: N must be a positive number of replicas, got $n" >&2
  exit 2
fi

bin=${FOLIO_BIN:-target/release/folio}
base=${FOLIO_CLUSTER_PORT:-18100}
logs=${FOLIO_CLUSTER_LOGS:-target/cluster}
mkdir -p "$logs"
[[ -x $bin ]] || { echo "cluster.sh: $bin not found (cargo build --release -p folio)" >&2; exit 2; }
if ! command -v vllm-router > /dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check vllm-router
fi

pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
}
trap stop EXIT

wait_for() { # URL SECONDS NAME
  for _ in $(seq 1 $(($2 * 2))); do
    curl -sf "$1" > /dev/null && return 0
    sleep 0.5
  done
  echo "cluster.sh: $3 did not answer $1 within $2 s (logs in $logs)" >&2
  return 1
}

threads=()
if [[ " ${FOLIO_SERVE_ARGS:-} " != *" --threads"* ]]; then
  share=$(($(nproc) / n))
  threads=(--threads $((share > 0 ? share : 1)))
fi
urls=()
sources=()
for i in $(seq 0 $((n - 1))); do
  port=$((base + 1 + i))
  events=$((base + 101 + i))
  # shellcheck disable=SC2086 # FOLIO_SERVE_ARGS is a list of flags
  "$bin" serve --port "$port" --kv-events-endpoint "tcp://*:$events" "${threads[@]}" ${FOLIO_SERVE_ARGS:-} \
    > "$logs/replica-$i.log" 2>&1 &
  pids+=($!)
  urls+=("http://127.0.0.1:$port")
  sources+=(--kv-event-source "http://127.0.0.1:$port=tcp://127.0.0.1:$events")
done
for u in "${urls[@]}"; do wait_for "$u/health" 300 "replica $u"; done

model=$(curl -sf "${urls[0]}/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
# The replicas' KV block size, from vLLM's vllm:cache_config_info gauge: the router hashes
# request tokens in blocks of this size.
block=$(curl -sf "${urls[0]}/metrics" | sed -n 's/^vllm:cache_config_info{.*block_size="\([0-9]*\)".*/\1/p')
router_args=(--host 127.0.0.1 --port "$base" --worker-urls "${urls[@]}" --policy "$policy")
if [[ $policy == kv_aware ]]; then
  router_args+=("${sources[@]}" --kv-event-model "$model" --kv-event-block-size "${block:-16}")
fi
# shellcheck disable=SC2086 # FOLIO_ROUTER_ARGS is a list of flags
vllm-router "${router_args[@]}" ${FOLIO_ROUTER_ARGS:-} > "$logs/router.log" 2>&1 &
pids+=($!)
router="http://127.0.0.1:$base"
wait_for "$router/health" 120 "vllm-router"

replicas=$(IFS=,; echo "${urls[*]}")
echo "cluster: $n replicas ($replicas), vllm-router --policy $policy at $router/v1 (model $model)"
if [[ $# -gt 0 ]]; then
  FOLIO_ROUTER_URL=$router FOLIO_REPLICA_URLS=$replicas "$@"
else
  wait
fi
