#!/usr/bin/env bash
# Build the ik_llama.cpp peer (llama-server, llama-bench, llama-batched-bench) outside this repository.
#
#   bash scripts/build_ik_llamacpp.sh SRC_DIR BUILD_DIR
#
# SRC_DIR: a checkout of github.com/ikawrakow/ik_llama.cpp. GGML_IQK_FA_ALL_QUANTS=OFF keeps
# the build to minutes (with it on, the flash-attention kernels of every K/V type pair make
# it take most of an hour); f16/q8_0/q4_0 K/V and the Hadamard options (-khad/-vhad) stay.
# Web-UI assets the checkout lacks are created empty (the API does not need them).
set -euo pipefail
SRC=${1:?usage: build_ik_llamacpp.sh SRC_DIR BUILD_DIR}
BUILD=${2:?usage: build_ik_llamacpp.sh SRC_DIR BUILD_DIR}
JOBS=${JOBS:-2}
for f in examples/server/public/index.html.gz \
         examples/server/public_llamacpp/index_llamacpp.html.gz \
         examples/server/public_llamacpp/loading.html; do
    [ -e "$SRC/$f" ] || { mkdir -p "$(dirname "$SRC/$f")"; : > "$SRC/$f"; }
done
cmake -S "$SRC" -B "$BUILD" \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON \
    -DGGML_IQK_FA_ALL_QUANTS=OFF \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF
nice -n 15 cmake --build "$BUILD" --config Release -j"$JOBS" --target llama-server llama-bench llama-batched-bench
ls -l "$BUILD"/bin/llama-server "$BUILD"/bin/llama-bench "$BUILD"/bin/llama-batched-bench
