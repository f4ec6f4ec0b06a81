#!/usr/bin/env bash
# lm-evaluation-harness against `folio serve` and against llama-server on the same GGUF,
# one loglikelihood task and one generation task, scores side by side.
#
#   scripts/lm_eval/run.sh [LIMIT]
#
# Environment (defaults in brackets):
#   MODEL          GGUF file [~/.cache/folio/models/SmolLM2-135M-Instruct.Q4_1.gguf]
#   FOLIO          folio binary [target/release/folio, or $CARGO_TARGET_DIR/release/folio]
#   LLAMA_SERVER   llama-server binary; unset = folio only
#   LM_EVAL_VENV   virtualenv with lm_eval, created on first use [~/.cache/folio/venv-lmeval]
#   OUT            results folder [/tmp/folio-lm-eval]
#   THREADS        threads for llama-server [all cores]
#
# The tasks are local (scripts/lm_eval/tasks: a 40-question multiple-choice set scored by
# loglikelihood and a 30-question capitals set scored by exact match of a greedy answer):
# lm_eval's stock tasks download their data from the Hugging Face hub. The tokenizer lm_eval
# needs (it counts context tokens itself) is built from the GGUF (gguf_tokenizer.py) and
# checked against the server's /tokenize on every task text before the run.
# llama-server refuses `echo`, which lm_eval's loglikelihood requests need, so its
# loglikelihood run goes through llama_echo_shim.py; its generation run goes direct.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
LIMIT="${1:-}"
MODEL="${MODEL:-$HOME/.cache/folio/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
FOLIO="${FOLIO:-${CARGO_TARGET_DIR:-$ROOT/target}/release/folio}"
VENV="${LM_EVAL_VENV:-$HOME/.cache/folio/venv-lmeval}"
OUT="${OUT:-/tmp/folio-lm-eval}"
THREADS="${THREADS:-$(nproc)}"
PORT=18731
NAME=lm-eval-model
mkdir -p "$OUT"
rm -rf "$OUT/folio" "$OUT/llama-mc" "$OUT/llama-gen"

if [ ! -x "$VENV/bin/lm_eval" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "lm_eval[api]" gguf
fi
PY="$VENV/bin/python"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

TOK="$OUT/tokenizer"
"$PY" "$HERE/gguf_tokenizer.py" "$MODEL" "$TOK"
TASKS="$OUT/tasks"
mkdir -p "$TASKS"
cp "$HERE"/tasks/*.jsonl "$TASKS/"
for y in "$HERE"/tasks/*.yaml; do sed "s#TASK_DIR#$TASKS#g" "$y" > "$TASKS/$(basename "$y")"; done

wait_up() { for _ in $(seq 300); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 1; done; echo "no server at $1" >&2; return 1; }

# The local tokenizer must split every task text as the server does: lm_eval slices the
# server's logprobs by its own token counts.
check_tokenizer() {
  "$PY" - "$1" "$TOK" "$TASKS" <<'PY'
import json, sys, glob, urllib.request
from transformers import AutoTokenizer
url, tok, tasks = sys.argv[1], AutoTokenizer.from_pretrained(sys.argv[2]), sys.argv[3]
texts = []
for f in glob.glob(tasks + "/*.jsonl"):
    for line in open(f):
        d = json.loads(line)
        texts += ["Question: " + d["question"] + "\nAnswer: " + c for c in d["choices"]] if "choices" in d else [
            "Q: What is the capital of " + d["country"] + "?\nA: " + d["answer"]]
bad = 0
for t in texts:
    r = urllib.request.Request(url + "/tokenize", json.dumps({"prompt": t}).encode(), {"Content-Type": "application/json"})
    got = json.loads(urllib.request.urlopen(r).read())["tokens"]
    if got != tok(t).input_ids:
        bad += 1
        print("tokenizer mismatch:", repr(t), got, tok(t).input_ids)
print(f"tokenizer check: {len(texts) - bad}/{len(texts)} texts tokenize alike")
sys.exit(1 if bad else 0)
PY
}

run_lm_eval() { # name base_url task...
  local who="$1" url="$2"; shift 2
  "$VENV/bin/lm_eval" --model local-completions \
    --model_args "model=$NAME,base_url=$url/v1/completions,tokenizer=$TOK,tokenized_requests=False,num_concurrent=1,max_retries=1,timeout=600" \
    --tasks "$(IFS=,; echo "$*")" --include_path "$TASKS" --batch_size 1 \
    ${LIMIT:+--limit "$LIMIT"} --output_path "$OUT/$who" --log_samples > "$OUT/$who.log" 2>&1 \
    || { tail -20 "$OUT/$who.log"; echo "lm_eval failed against $who: $OUT/$who.log" >&2; return 1; }
  grep -E "^\|" "$OUT/$who.log" || true
}

echo "== folio ($FOLIO)"
"$FOLIO" serve --model "$MODEL" --port $PORT --served-model-name $NAME > "$OUT/folio-serve.log" 2>&1 &
FPID=$!
trap 'kill $FPID 2>/dev/null || true' EXIT
wait_up "http://127.0.0.1:$PORT/health"
check_tokenizer "http://127.0.0.1:$PORT"
start=$(date +%s)
run_lm_eval folio "http://127.0.0.1:$PORT" folio_mini_mc folio_mini_capitals
echo "folio: $(( $(date +%s) - start )) s"
kill $FPID; wait $FPID 2>/dev/null || true

if [ -n "${LLAMA_SERVER:-}" ]; then
  echo "== llama-server ($LLAMA_SERVER)"
  "$LLAMA_SERVER" -m "$MODEL" --port $((PORT + 1)) -t "$THREADS" --parallel 1 -c 8192 \
    --alias $NAME > "$OUT/llama-server.log" 2>&1 &
  LPID=$!
  "$PY" "$HERE/llama_echo_shim.py" $((PORT + 2)) "http://127.0.0.1:$((PORT + 1))" &
  SPID=$!
  trap 'kill $LPID $SPID 2>/dev/null || true' EXIT
  wait_up "http://127.0.0.1:$((PORT + 1))/health"
  start=$(date +%s)
  run_lm_eval llama-mc "http://127.0.0.1:$((PORT + 2))" folio_mini_mc
  run_lm_eval llama-gen "http://127.0.0.1:$((PORT + 1))" folio_mini_capitals
  echo "llama-server: $(( $(date +%s) - start )) s"
  kill $LPID $SPID; wait $LPID 2>/dev/null || true
fi

"$PY" - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
rows = {}
for who, dirs in [("folio", ["folio"]), ("llama-server", ["llama-mc", "llama-gen"])]:
    for d in dirs:
        for f in glob.glob(f"{out}/{d}/**/results_*.json", recursive=True):
            for task, m in json.load(open(f))["results"].items():
                for k, v in m.items():
                    if k.endswith(",none") and "stderr" not in k:
                        rows.setdefault((task, k[:-5]), {})[who] = (v, m.get(k.replace(",", "_stderr,")))
print(f"\n{'task':24} {'metric':12} {'folio':>16} {'llama-server':>16}")
for (task, metric), v in sorted(rows.items()):
    cell = lambda w: f"{v[w][0]:.4f} ± {v[w][1]:.4f}" if w in v and v[w][1] is not None else (f"{v[w][0]:.4f}" if w in v else "-")
    print(f"{task:24} {metric:12} {cell('folio'):>16} {cell('llama-server'):>16}")
PY
