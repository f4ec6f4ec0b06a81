"""Builds cross-check fixtures with the independent `gguf` Python package (llama.cpp's gguf-py).

Usage: python3 gen.py OUT_DIR; then FOLIO_GGUF_CROSSCHECK=OUT_DIR cargo test -p folio-gguf --test crosscheck

Writes, per type T (dequantization: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS
IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S;
quantization, which must match bit for bit: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 BF16 F16):
  deq_T.bin / deq_T.f32   random blocks (sane f16 scales) and gguf-py's dequantization
  q_T.src / q_T.bin       random f32 values and gguf-py's quantization (types it quantizes)
and mixed.gguf, written by gguf-py's GGUFWriter, with metadata of many types and tensors.
"""
import sys, os
import numpy as np
import gguf
from gguf import quants, GGMLQuantizationType as T

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(1234)

# (type, block bytes, byte offsets of f16 scale fields)
layouts = {
    "Q4_0": (T.Q4_0, 18, [0]),
    "Q4_1": (T.Q4_1, 20, [0, 2]),
    "Q8_0": (T.Q8_0, 34, [0]),
    "Q4_K": (T.Q4_K, 144, [0, 2]),
    "Q6_K": (T.Q6_K, 210, [208]),
    "Q5_0": (T.Q5_0, 22, [0]),
    "Q5_1": (T.Q5_1, 24, [0, 2]),
    "Q2_K": (T.Q2_K, 84, [80, 82]),
    "Q3_K": (T.Q3_K, 110, [108]),
    "Q5_K": (T.Q5_K, 176, [0, 2]),
    "IQ4_NL": (T.IQ4_NL, 18, [0]),
    "IQ4_XS": (T.IQ4_XS, 136, [0]),
    "IQ2_XXS": (T.IQ2_XXS, 66, [0]),
    "IQ2_XS": (T.IQ2_XS, 74, [0]),
    "IQ2_S": (T.IQ2_S, 82, [0]),
    "IQ3_XXS": (T.IQ3_XXS, 98, [0]),
    "IQ3_S": (T.IQ3_S, 110, [0]),
}
for name, (qt, size, f16_fields) in layouts.items():
    assert gguf.GGML_QUANT_SIZES[qt][1] == size, name
    n_blocks = 64
    blocks = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in f16_fields:
        vals = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        blocks[:, off:off + 2] = vals.view(np.uint8).reshape(n_blocks, 2)
    deq = quants.dequantize(blocks.reshape(-1), qt).astype(np.float32).reshape(-1)
    blocks.tofile(f"{out}/deq_{name}.bin")
    deq.tofile(f"{out}/deq_{name}.f32")

for name, qt in [("Q4_0", T.Q4_0), ("Q4_1", T.Q4_1), ("Q5_0", T.Q5_0), ("Q5_1", T.Q5_1),
                 ("Q8_0", T.Q8_0), ("BF16", T.BF16), ("F16", T.F16)]:
    src = (rng.standard_normal(32 * 64) * 0.1).astype(np.float32)
    src[:32] = 0.0  # an all-zero block
    if qt == T.F16:
        q = src.astype(np.float16).view(np.uint8)
    else:
        q = quants.quantize(src, qt)
    src.tofile(f"{out}/q_{name}.src")
    np.asarray(q, dtype=np.uint8).tofile(f"{out}/q_{name}.bin")

w = gguf.GGUFWriter(f"{out}/mixed.gguf", "llama")
w.add_uint32("llama.block_count", 30)
w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}")
w.add_bool("tokenizer.ggml.add_bos_token", False)
w.add_token_list(["<s>", "a", "héllo"])
w.add_token_scores([0.0, -1.5, 2.25])
w.add_token_types([3, 1, 1])
w.add_int64("x.i64", -7)
w.add_float64("x.f64", 0.1)
w.add_tensor("f32", np.arange(8, dtype=np.float32).reshape(2, 4))
w.add_tensor("q8", quants.quantize(np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32), T.Q8_0), raw_dtype=T.Q8_0)
w.add_tensor("f16", np.array([0.5, -2.0], dtype=np.float16))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote fixtures to", out)

# Real model tensors, dequantized by gguf-py's own reader (optional).
model = os.environ.get("FOLIO_MODEL", os.path.expanduser("~/.cache/folio/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
if os.path.exists(model):
    r = gguf.GGUFReader(model)
    by_name = {t.name: t for t in r.tensors}
    for name in ["blk.0.attn_q.weight", "blk.0.attn_norm.weight", "token_embd.weight"]:
        t = by_name[name]
        quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1).tofile(f"{out}/model_{name}.f32")
    with open(f"{out}/model_path.txt", "w") as fh:
        fh.write(model)
    print("dumped real model tensors from", model)
