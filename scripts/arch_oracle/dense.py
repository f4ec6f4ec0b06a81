"""The llama-shaped block the dense architectures of scripts/arch_oracle share (smollm3,
granite, olmo2, ernie4_5, mistral3): the shape keys convert_hf_to_gguf.py writes for every
text model, and one layer's attention and gated FFN tensors under llama.cpp's names."""

D, HEADS, KV_HEADS, HD, FFN = 64, 4, 2, 16, 128


def shape_keys(t, layers, ctx=512, rope_dim=True):
    """TextModel.set_gguf_parameters' keys (context, widths, heads, eps, vocab)."""
    from common import VOCAB

    t.kv("add_context_length", ctx)
    t.kv("add_embedding_length", D)
    t.kv("add_block_count", layers)
    t.kv("add_feed_forward_length", FFN)
    t.kv("add_head_count", HEADS)
    t.kv("add_head_count_kv", KV_HEADS)
    if rope_dim:
        t.kv("add_rope_dimension_count", HD)
    t.kv("add_rope_freq_base", 10000.0)
    t.kv("add_layer_norm_rms_eps", 1e-5)
    t.kv("add_vocab_size", VOCAB)


def attention(t, i):
    p = f"blk.{i}"
    t.tensor(f"{p}.attn_q.weight", [D, HEADS * HD], scale=D ** -0.5)
    t.tensor(f"{p}.attn_k.weight", [D, KV_HEADS * HD], scale=D ** -0.5)
    t.tensor(f"{p}.attn_v.weight", [D, KV_HEADS * HD], scale=D ** -0.5)
    t.tensor(f"{p}.attn_output.weight", [HEADS * HD, D], scale=(HEADS * HD) ** -0.5)


def ffn(t, i):
    p = f"blk.{i}"
    t.tensor(f"{p}.ffn_gate.weight", [D, FFN], scale=D ** -0.5)
    t.tensor(f"{p}.ffn_up.weight", [D, FFN], scale=D ** -0.5)
    t.tensor(f"{p}.ffn_down.weight", [FFN, D], scale=FFN ** -0.5)


def llama_layers(t, layers):
    """Pre-norm blocks: attn_norm, Q/K/V/O, ffn_norm, gate/up/down."""
    for i in range(layers):
        t.norm(f"blk.{i}.attn_norm.weight", D)
        attention(t, i)
        t.norm(f"blk.{i}.ffn_norm.weight", D)
        ffn(t, i)


def head(t, tied=False):
    from common import VOCAB

    t.norm("output_norm.weight", D)
    if not tied:
        t.tensor("output.weight", [D, VOCAB], scale=D ** -0.5 * 4)
