#!/usr/bin/env bash
# folio serve (no engine flags) beside llama-server on the same GGUF and the same load:
# C concurrent 256-token prompts, 128 output tokens each (ignore_eos), all sent at once,
# for each C in $LEVELS, through `folio bench serve` (the same client for both servers).
# Prints each server's table and a side-by-side summary (output tok/s, TTFT, ITL p99).
#
#   LLAMA_SERVER=/path/to/llama-server scripts/serve_vs_llama_server.sh [MODEL]
#
# FOLIO_FLAGS="--max-itl-ms 120 --token-budget 2048" runs folio with those flags instead (the
# scheduler's knobs, for comparison); SKIP_LLAMA=1 runs folio alone.
# MODEL: a GGUF path or catalogue name (default qwen2.5-coder-1.5b). llama-server runs
# with --parallel NP (default: the largest level, one slot per client), a context of 512
# tokens per slot, and the same thread count as folio (all cores). Peers stay out of CI: this
# script is run by hand (scripts/build_llamacpp.sh builds llama-server).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FOLIO_BIN:-target/release/folio}
llama=${LLAMA_SERVER:-}
[[ -n $llama || -n ${SKIP_LLAMA:-} ]] || { echo "set LLAMA_SERVER to a llama-server binary (scripts/build_llamacpp.sh)" >&2; exit 2; }
model=${1:-qwen2.5-coder-1.5b}
levels=${LEVELS:-16,64}
out=${OUT:-target/serve-vs-llama}
threads=$(nproc)
np=${NP:-$(tr ',' '\n' <<< "$levels" | sort -n | tail -1)}
mkdir -p "$out"
path=$("$bin" models | awk -v m="$model" '$1 == m' | grep -o '/[^ ]*\.gguf' | head -1 || true)
[[ -z $path ]] && path=$model
[[ -f $path ]] || { echo "no model file for $model (fetch it: $bin generate --model $model --prompt hi)" >&2; exit 2; }

wait_up() { for _ in $(seq 1 600); do curl -sf "$1/health" > /dev/null && return 0; sleep 0.5; done; return 1; }
load() { # NAME URL
  "$bin" bench serve --base-url "$2" --workload random --input-tokens 256 --range-ratio 0 \
    --output-tokens 128 --ignore-eos --max-concurrency "$levels" --per-concurrency 1 \
    --seed 7 --no-progress --label "$1" --json "$out/$1.json" | tee "$out/$1.txt"
}

# shellcheck disable=SC2086 # FOLIO_FLAGS: extra `folio serve` flags, word-split on purpose
"$bin" serve --model "$path" --port 18601 ${FOLIO_FLAGS:-} > "$out/folio.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_up http://127.0.0.1:18601
load folio http://127.0.0.1:18601/v1
kill $pid; wait $pid 2>/dev/null || true

if [[ -z ${SKIP_LLAMA:-} ]]; then
  "$llama" -m "$path" --port 18602 -t "$threads" --parallel "$np" -c $((np * 512)) \
    > "$out/llama-server.log" 2>&1 &
  pid=$!
  wait_up http://127.0.0.1:18602
  load llama-server http://127.0.0.1:18602/v1
  kill $pid; wait $pid 2>/dev/null || true
fi

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
names = ["folio"] + ([] if os.environ.get("SKIP_LLAMA") else ["llama-server"])
runs = {n: json.load(open(f"{out}/{n}.json"))["runs"] for n in names}
print(f"{'server':<14}{'conc':>5}{'out tok/s':>11}{'TTFT mean':>11}{'TTFT p50':>10}{'ITL p50':>9}{'ITL p99':>9}")
for n, rs in runs.items():
    for r in rs:
        c = r["setup"]["max_concurrency"]
        print(f"{n:<14}{c!s:>5}{r['output_throughput']:>11.1f}{r['ttft_ms']['mean']:>9.0f}ms"
              f"{r['ttft_ms']['p50']:>8.0f}ms{r['itl_ms']['p50']:>7.0f}ms{r['itl_ms']['p99']:>7.0f}ms")
PY
