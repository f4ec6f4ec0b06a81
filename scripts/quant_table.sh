#!/usr/bin/env bash
# folio beside llama.cpp on each GGUF given, one after the other on an otherwise idle
# machine: pp512, tg128, aggregate decode of 16 sequences at 256 tokens of context, weight
# bytes per decode step and MBU (folio's DRAM probe). The llama.cpp binaries come from
# scripts/build_llamacpp.sh (add the llama-batched-bench target:
# `cmake --build BUILD --target llama-batched-bench`); the files from scripts/make_quants.sh.
#
#   LLAMA_BIN=/work/peer/build/bin bash scripts/quant_table.sh A.gguf B.gguf ...
#
# Prints each tool's own output; the README's table is read off it.
set -euo pipefail
BIN=${LLAMA_BIN:?set LLAMA_BIN to the llama.cpp build bin/ folder}
FOLIO=${FOLIO:-target/release/folio}
THREADS=${THREADS:-2}
for f in "$@"; do
    echo "=================== $f"
    echo "--- folio bench model"
    "$FOLIO" bench model --model "$f" --batch 1,16 --threads "$THREADS" 2>/dev/null
    echo "--- llama-bench -t $THREADS (pp512, tg128)"
    "$BIN/llama-bench" -m "$f" -t "$THREADS" -p 512 -n 128 -r 3 2>/dev/null
    echo "--- llama-batched-bench: 16 sequences, 256-token prompts, 32 tokens each"
    "$BIN/llama-batched-bench" -m "$f" -t "$THREADS" -tb "$THREADS" -c 8192 -b 2048 -ub 512 \
        -npp 256 -ntg 32 -npl 16 2>/dev/null | grep -E "^\|" || true
done
