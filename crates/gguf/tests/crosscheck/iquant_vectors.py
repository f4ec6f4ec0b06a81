"""Prints the expected hashes of `tests/dequant_iquant.rs`: gguf-py's numpy dequantization
(llama.cpp's independent Python implementation) of 16 pseudo-random blocks per grid i-quant.

The blocks come from the same 64-bit LCG as the Rust test; the hash is FNV-1a over the
little-endian f32 bits. Usage: python3 iquant_vectors.py (needs `pip install gguf numpy`).
"""
import numpy as np
from gguf import quants, GGMLQuantizationType as T

M = (1 << 64) - 1


def blocks(seed, n, size):
    x = seed
    out = np.zeros((n, size), dtype=np.uint8)
    for i in range(n):
        for j in range(size):
            x = (x * 6364136223846793005 + 1442695040888963407) & M
            out[i, j] = x >> 56
        # A sane f16 scale: exponent 2^-7 .. 2^-6, any mantissa, either sign.
        d = 0x2000 | (int(out[i, 1]) & 0x83) << 8 | int(out[i, 0])
        out[i, 0], out[i, 1] = d & 255, d >> 8
    return out


def fnv(vals):
    h = 0xcbf29ce484222325
    for b in vals.astype("<f4").tobytes():
        h = ((h ^ b) * 0x100000001b3) & M
    return h


for name, t, size in [("IQ2_XXS", T.IQ2_XXS, 66), ("IQ2_XS", T.IQ2_XS, 74), ("IQ2_S", T.IQ2_S, 82),
                      ("IQ3_XXS", T.IQ3_XXS, 98), ("IQ3_S", T.IQ3_S, 110)]:
    b = blocks(int(t), 16, size)
    deq = quants.dequantize(b.reshape(-1), t).astype(np.float32).reshape(-1)
    print(f"{name}: 0x{fnv(deq):016x}, first {deq[0]!r}")
