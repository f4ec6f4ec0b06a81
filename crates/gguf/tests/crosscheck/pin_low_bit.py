"""Pins gguf-py's (llama.cpp's independent numpy code) dequantization and quantization of
the low-bit types MXFP4, TQ1_0, TQ2_0, IQ1_S and IQ1_M into testdata/ggml-low-bit/, read by
crates/gguf/tests/dequant_low_bit.rs. Run once from the repository root:

    python3 crates/gguf/tests/crosscheck/pin_low_bit.py [PATH_TO_LLAMA_CPP_GGUF_PY]

(gguf-py from llama.cpp b11312; the PyPI `gguf` 0.19 lacks MXFP4.) Writes per type T:
  T.blocks / T.f32   8 random blocks (sane scales) and their dequantization
  q_T.src / q_T.bin  random f32 values and their quantization (MXFP4, TQ1_0, TQ2_0)
"""
import sys, os
import numpy as np

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else
                "/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py")
import gguf
from gguf import quants, GGMLQuantizationType as T

out = "testdata/ggml-low-bit"
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(4321)
N = 8


def f16s(n, scale):
    return (rng.standard_normal(n) * scale).astype(np.float16)


for name, qt in [("MXFP4", T.MXFP4), ("TQ1_0", T.TQ1_0), ("TQ2_0", T.TQ2_0),
                 ("IQ1_S", T.IQ1_S), ("IQ1_M", T.IQ1_M)]:
    size = gguf.GGML_QUANT_SIZES[qt][1]
    blocks = rng.integers(0, 256, size=(N, size), dtype=np.uint8)
    if name == "MXFP4":
        # Every exponent class: the two subnormal scales, small, around 1, large.
        blocks[:, 0] = [0, 1, 2, 100, 120, 127, 130, 200]
    elif name in ("TQ1_0", "TQ2_0"):
        blocks[:, size - 2:] = f16s(N, 0.05).view(np.uint8).reshape(N, 2)
    elif name == "IQ1_S":
        blocks[:, 0:2] = f16s(N, 0.05).view(np.uint8).reshape(N, 2)
    else:  # IQ1_M: the f16 d lives in the top nibbles of the four u16 scale words
        d = f16s(N, 0.05).view(np.uint16)
        sc = blocks[:, 48:56].copy().view(np.uint16) & np.uint16(0x0FFF)
        for i in range(4):
            sc[:, i] |= ((d >> np.uint16(4 * i)) & np.uint16(0xF)) << np.uint16(12)
        blocks[:, 48:56] = sc.view(np.uint8)
    deq = quants.dequantize(blocks.reshape(-1), qt).astype(np.float32).reshape(-1)
    blocks.tofile(f"{out}/{name}.blocks")
    deq.tofile(f"{out}/{name}.f32")

for name, qt in [("MXFP4", T.MXFP4), ("TQ1_0", T.TQ1_0), ("TQ2_0", T.TQ2_0)]:
    bs = gguf.GGML_QUANT_SIZES[qt][0]
    src = (rng.standard_normal(bs * N) * 0.1).astype(np.float32)
    src[:bs] = 0.0  # an all-zero block
    q = quants.quantize(src.reshape(N, bs), qt)
    src.tofile(f"{out}/q_{name}.src")
    np.asarray(q, dtype=np.uint8).reshape(-1).tofile(f"{out}/q_{name}.bin")
print("ok")
