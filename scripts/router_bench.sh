#!/usr/bin/env bash
# Routing policies compared on the shared-prefix workload: for each of round_robin,
# cache_aware and kv_aware, two fresh replicas behind vllm-router (scripts/cluster.sh),
# then one replica alone behind it; `folio bench serve` through the router with
# --replica-metrics for the per-replica requests and prefix-cache hit rates. Result files
# go to $OUT (default target/router-bench).
#
#   scripts/router_bench.sh [extra `folio bench serve` flags]
#
# Defaults: 8 prefixes of 1000 tokens, each round of 8 requests in a fresh order
# (shared-prefix-shuffled), 24 requests with $CONCURRENCY in flight (default 2; a closed
# loop: an open-loop rate that overloads a small machine measures queueing, and events
# then trail the requests), 32-token suffixes, 8 output tokens. Each replica gets
# cores / replicas compute threads (scripts/cluster.sh).
#
# vllm-router's kv_aware cost is a replica's new prefill tokens plus the prompt tokens of
# the requests it still has in flight, so with requests in flight it may send a request
# to an idle replica rather than to the busy one that holds its prefix; at CONCURRENCY=1
# the prefix alone decides.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FOLIO_BIN:-target/release/folio}
out=${OUT:-target/router-bench}
mkdir -p "$out"
base=${FOLIO_CLUSTER_PORT:-18100}
run() { # NAME REPLICAS POLICY
  local urls="" i
  for i in $(seq 1 "$2"); do urls+="http://127.0.0.1:$((base + i)),"; done
  urls=${urls%,}
  FOLIO_CLUSTER_LOGS="$out/$1" scripts/cluster.sh "$2" "$3" -- \
    "$bin" bench serve --base-url "http://127.0.0.1:$base" --replica-metrics "$urls" \
    --workload shared-prefix-shuffled --num-prefixes 8 --prefix-tokens 1000 \
    --input-tokens 32 --output-tokens 8 --num-requests 24 --max-concurrency "${CONCURRENCY:-2}" --seed 1 \
    --no-progress --label "$1" --json "$out/$1.json" "${@:4}" | tee "$out/$1.txt"
}
run round_robin 2 round_robin "$@"
run cache_aware 2 cache_aware "$@"
run kv_aware 2 kv_aware "$@"
run one_replica 1 round_robin "$@"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'setup':<12}{'hit rate':>10}{'TTFT p50':>11}{'TTFT p99':>11}  requests per replica")
for name in ("round_robin", "cache_aware", "kv_aware", "one_replica"):
    r = json.load(open(f"{out}/{name}.json"))["runs"][0]
    hit = r["prefix_cache"]["hit_rate"] if r.get("prefix_cache") else None  # the replicas' combined
    reps = [int(x["requests"]) for x in r.get("replicas", [])]
    t = r["ttft_ms"]
    print(f"{name:<12}{(hit or 0) * 100:>9.1f}%{t['p50']:>9.0f}ms{t['p99']:>9.0f}ms  {reps}")
PY
