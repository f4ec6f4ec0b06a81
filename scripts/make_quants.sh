#!/usr/bin/env bash
# Requantize the Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF into the other formats folio reads,
# with llama.cpp's llama-quantize (built by scripts/build_llamacpp.sh), then list the tensor
# types in each output (scripts/gguf_tensor_types.py, needs `pip install gguf`).
#
#   bash scripts/make_quants.sh /work/peer/build/bin/llama-quantize \
#       /work/dl/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf /work/dl/quants
#
# --allow-requantize: the source is already quantized (Q4_K_M), so these are requantized
# from dequantized Q4_K_M weights, not from F16: fine as test inputs, not as quality references.
# No imatrix: IQ4_XS / IQ4_NL / Q2_K / Q3_K_M are made without one (llama-quantize allows it
# for these types). With IMATRIX=FILE (an importance matrix, which llama-quantize requires
# for the 2-bit i-quants) the grid i-quants IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_S, IQ1_S,
# IQ1_M, the ternary TQ1_0 TQ2_0 and MXFP4 are made too, and every type is quantized with it.
# Note llama-quantize's names: its IQ2_S mix holds IQ2_XS matrices (and IQ3_S), its IQ2_M
# mix the IQ2_S ones; MXFP4_MOE on a dense model makes every matrix MXFP4. Make one from a small text first, e.g.
#   llama-imatrix -m SRC.gguf -f text.txt -o /work/dl/qwen.imatrix -t 1 --chunks 4 llama-quantize picks per-tensor types itself (token_embd, output, and
# some ffn_down / attn_v get other types in the _K_M/_XS mixes; rows not a multiple of 256
# fall back to a legacy type), so each file mixes types: see the listing.
set -euo pipefail
Q=${1:?usage: make_quants.sh LLAMA_QUANTIZE SRC.gguf OUTDIR}
SRC=${2:?}
OUT=${3:?}
THREADS=${THREADS:-2}
IMATRIX=${IMATRIX:-}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)

pairs="q4_0:Q4_0 q8_0:Q8_0 q5_k_m:Q5_K_M q6_k:Q6_K iq4_xs:IQ4_XS q3_k_m:Q3_K_M
       q2_k:Q2_K q5_0:Q5_0 q5_1:Q5_1 iq4_nl:IQ4_NL"
imat=()
if [ -n "$IMATRIX" ]; then
    imat=(--imatrix "$IMATRIX")
    pairs="$pairs iq2_xxs:IQ2_XXS iq2_xs:IQ2_XS iq2_s:IQ2_S iq2_m:IQ2_M iq3_xxs:IQ3_XXS iq3_s:IQ3_S
           iq1_s:IQ1_S iq1_m:IQ1_M tq1_0:TQ1_0 tq2_0:TQ2_0 mxfp4:MXFP4_MOE"
fi
for pair in $pairs; do
    name=${pair%%:*}
    type=${pair#*:}
    dst="$OUT/qwen-$name.gguf"
    if [ -s "$dst" ] && [ "${FORCE:-0}" != 1 ]; then
        echo "== $dst exists (FORCE=1 to redo)"
    else
        echo "== $type -> $dst"
        nice -n 10 "$Q" --allow-requantize "${imat[@]}" "$SRC" "$dst" "$type" "$THREADS" > "$dst.log" 2>&1 \
            || { tail -20 "$dst.log"; exit 1; }
        tail -2 "$dst.log"
    fi
done

# The other grid i-quants in one small file: layers 0-4 only (their imatrix quantization is
# slow), for crates/engine/tests/qwen_greedy.rs.
dst="$OUT/qwen-iqmix.gguf"
if [ -n "$IMATRIX" ] && { [ ! -s "$dst" ] || [ "${FORCE:-0}" = 1 ]; }; then
    echo "== IQ2_XS/IQ2_S/IQ3_XXS/IQ3_S in layers 0-4 -> $dst"
    mix=()
    for tt in attn_q=iq2_xs attn_output=iq3_s ffn_gate=iq3_xxs ffn_up=iq2_s ffn_down=iq3_s; do
        mix+=(--tensor-type "blk\\.[0-4]\\.$tt")
    done
    nice -n 10 "$Q" --allow-requantize "${imat[@]}" "${mix[@]}" "$SRC" "$dst" Q4_K_M "$THREADS" \
        > "$dst.log" 2>&1 || { tail -20 "$dst.log"; exit 1; }
    tail -2 "$dst.log"
fi

python3 "$here/gguf_tensor_types.py" "$OUT"/qwen-*.gguf
