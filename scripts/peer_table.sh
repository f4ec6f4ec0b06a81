#!/usr/bin/env bash
# folio beside llama.cpp and ik_llama.cpp on the same GGUF files, interleaved: for each round
# and each file, `folio bench model` (pp512, tg128, decode at batch 1/4/16/64 from a
# 256-token context), then llama.cpp's and ik_llama.cpp's `llama-bench -t T -p 512 -n 128`
# (llama.cpp with and without its weight repacking; ik with `-rtr 1`, its run-time repack)
# and `llama-batched-bench -npp 256 -ntg 32 -npl 16` (S_TG: decode tok/s of 16 streams at a
# 256-token context, folio's `decode 16 256` row). Run it on an idle machine: on 2 cores a
# build beside it halves every figure.
#
#   LLAMA_BIN=/work/peer/build/bin IK_BIN=/work/peer/ik-build/bin \
#       scripts/peer_table.sh MODEL.gguf [MODEL.gguf ...]
#
# BATCH=1,16 limits folio's decode rows to the ones the table reads (default 1,4,16,64).
#
# Builds: scripts/build_llamacpp.sh and scripts/build_ik_llamacpp.sh. Logs go to $OUT (default target/peer-table), one file per
# engine x file x round; the summary greps the figures out of them.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FOLIO_BIN:-target/release/folio}
llama=${LLAMA_BIN:?set LLAMA_BIN to llama.cpp build/bin}
ik=${IK_BIN:?set IK_BIN to ik_llama.cpp build/bin}
rounds=${ROUNDS:-2}
threads=${THREADS:-$(nproc)}
out=${OUT:-target/peer-table}
batch=${BATCH:-1,4,16,64}
mkdir -p "$out"
[ $# -gt 0 ] || { echo "usage: peer_table.sh MODEL.gguf ..." >&2; exit 2; }

for r in $(seq 1 "$rounds"); do
  for f in "$@"; do
    n=$(basename "$f" .gguf)
    echo "== round $r: $n" >&2
    "$bin" bench model --model "$f" --batch "$batch" > "$out/$n.folio.$r.txt" 2>&1
    "$llama/llama-bench" -m "$f" -t "$threads" -p 512 -n 128 -r 2 --repack 0,1 \
      > "$out/$n.llama.$r.txt" 2>&1
    "$llama/llama-batched-bench" -m "$f" -t "$threads" -c 8192 -npp 256 -ntg 32 -npl 16 \
      > "$out/$n.llama-bb.$r.txt" 2>&1
    "$ik/llama-bench" -m "$f" -t "$threads" -p 512 -n 128 -r 2 -rtr 1 \
      > "$out/$n.ik.$r.txt" 2>&1
    "$ik/llama-batched-bench" -m "$f" -t "$threads" -c 8192 -npp 256 -ntg 32 -npl 16 -rtr \
      > "$out/$n.ik-bb.$r.txt" 2>&1
  done
done

for f in "$@"; do
  n=$(basename "$f" .gguf)
  echo "### $n"
  for r in $(seq 1 "$rounds"); do
    echo "-- round $r"
    grep -E "^(pp512|tg128|decode +f16 +16 )" "$out/$n.folio.$r.txt" | awk '{v = ($12 ~ /%$/) ? " MFU-vec " $12 : ""; print "folio", $1, $3, $7, "MBU " $10, "MFU " $11 v}'
    grep -E "pp512|tg128" "$out/$n.llama.$r.txt" | sed 's/^/llama.cpp /'
    grep -E "^\| +256 \| +32 \| +16 " "$out/$n.llama-bb.$r.txt" | sed 's/^/llama.cpp 16x256 /'
    grep -E "pp512|tg128" "$out/$n.ik.$r.txt" | sed 's/^/ik_llama.cpp /'
    grep -E "^\| +256 \| +32 \| +16 " "$out/$n.ik-bb.$r.txt" | sed 's/^/ik_llama.cpp 16x256 /'
  done
done
