#!/usr/bin/env bash
# Build the llama.cpp peer (llama-bench, llama-quantize, llama-server, llama-cli, llama-imatrix,
# llama-batched-bench) from the llama.cpp vendored in llama-cpp-python's source package,
# outside this repository.
#
#   pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: --no-build-isolation -d DL
#       (--no-build-isolation needs `pip install scikit-build-core`; without it pip builds
#        cmake and ninja from source just to read the package's metadata)
#   bash scripts/build_llamacpp.sh DL/llama_cpp_python-0.3.36.tar.gz /work/peer
#
# llama-cpp-python 0.3.36 vendors ggml-org/llama.cpp@0c1e57098 (build b11312); the sdist
# has no .git, so the commit and build number are passed to cmake explicitly (they show up
# in `llama-bench` output, `llama-server --version` and the server's /props).
#
# No network at build time: no HTTPS (LLAMA_OPENSSL=OFF), no web UI download/npm build
# (LLAMA_USE_PREBUILT_UI=OFF, LLAMA_BUILD_UI=OFF); the server still serves its API.
#
# GGML_NATIVE=ON, but with AMX turned off: on one Intel host the AMX path died with SIGILL
# (the CPU advertised AMX, the kernel/VM did not grant it), and on another, which grants it
# (2026-12-05, family 6 model 167), llama-bench's default (repacked) run dies with SIGSEGV
# in ggml_backend_amx_mul_mat. GCC lets explicit -mno-* flags win over -march=native
# whatever their order.
set -euo pipefail

TARBALL=${1:?usage: build_llamacpp.sh TARBALL BUILD_ROOT}
ROOT=${2:?usage: build_llamacpp.sh TARBALL BUILD_ROOT}
JOBS=${JOBS:-2}
LLAMA_COMMIT=${LLAMA_COMMIT:-0c1e57098}
LLAMA_BUILD_NUMBER=${LLAMA_BUILD_NUMBER:-11312}
NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd)
NAME=$(basename "$TARBALL" .tar.gz)
if [ ! -d "$ROOT/$NAME" ]; then
    tar -xzf "$TARBALL" -C "$ROOT"
fi
SRC="$ROOT/$NAME/vendor/llama.cpp"
BUILD="$ROOT/build"
[ -f "$SRC/CMakeLists.txt" ] || { echo "no llama.cpp at $SRC" >&2; exit 1; }

cmake -S "$SRC" -B "$BUILD" \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$NOAMX" \
    -DCMAKE_CXX_FLAGS="$NOAMX" \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_NUMBER="$LLAMA_BUILD_NUMBER" \
    -DLLAMA_BUILD_COMMIT="$LLAMA_COMMIT"

cd "$BUILD"
nice -n 10 cmake --build . --config Release -j"$JOBS" \
    --target llama-bench llama-quantize llama-server llama-cli llama-imatrix llama-batched-bench

echo "llama.cpp ${LLAMA_COMMIT} (build b${LLAMA_BUILD_NUMBER}) binaries in $BUILD/bin:"
ls -l "$BUILD"/bin/llama-bench "$BUILD"/bin/llama-quantize "$BUILD"/bin/llama-server "$BUILD"/bin/llama-cli "$BUILD"/bin/llama-imatrix "$BUILD"/bin/llama-batched-bench
