"""The llama-shaped block the dense architectures of scripts/arch_oracle share (llama,
smollm3, granite, olmo2, ernie4_5, mistral3, glm4, cohere2): the shape keys convert_hf_to_gguf.py writes for every
text model, and one layer's attention and gated FFN tensors under llama.cpp's names."""

D, HEADS, KV_HEADS, HD, FFN = 64, 4, 2, 16, 128


def shape_keys(t, layers, ctx=512, ffn=FFN, head_dims=False, rope_dim=HD,
               eps="add_layer_norm_rms_eps"):
    """TextModel.set_gguf_parameters' keys (context, widths, heads, eps, vocab).
    `head_dims` adds `attention.key_length`/`value_length` (= HD); `rope_dim` None leaves
    `rope.dimension_count` out; `eps` names the norm's epsilon key (RMS or LayerNorm)."""
    from common import VOCAB

    t.kv("add_context_length", ctx)
    t.kv("add_embedding_length", D)
    t.kv("add_block_count", layers)
    t.kv("add_feed_forward_length", ffn)
    t.kv("add_head_count", HEADS)
    t.kv("add_head_count_kv", KV_HEADS)
    if head_dims:
        t.kv("add_key_length", HD)
        t.kv("add_value_length", HD)
    if rope_dim is not None:
        t.kv("add_rope_dimension_count", rope_dim)
    t.kv("add_rope_freq_base", 10000.0)
    t.kv(eps, 1e-5)
    t.kv("add_vocab_size", VOCAB)


def embeddings(t):
    from common import VOCAB

    t.tensor("token_embd.weight", [D, VOCAB], scale=1.0)


def attention(t, i, bias=None, out_gain=1):
    """Q/K/V/O; `bias` (a scale) adds Q/K/V biases, `out_gain` scales attn_output."""
    p = f"blk.{i}"
    t.tensor(f"{p}.attn_q.weight", [D, HEADS * HD], scale=D ** -0.5)
    t.tensor(f"{p}.attn_k.weight", [D, KV_HEADS * HD], scale=D ** -0.5)
    t.tensor(f"{p}.attn_v.weight", [D, KV_HEADS * HD], scale=D ** -0.5)
    if bias is not None:
        t.tensor(f"{p}.attn_q.bias", [HEADS * HD], scale=bias)
        t.tensor(f"{p}.attn_k.bias", [KV_HEADS * HD], scale=bias)
        t.tensor(f"{p}.attn_v.bias", [KV_HEADS * HD], scale=bias)
    t.tensor(f"{p}.attn_output.weight", [HEADS * HD, D], scale=out_gain * (HEADS * HD) ** -0.5)


def ffn(t, i, ffn=FFN, fused=False, down_gain=1):
    """Gated FFN; `fused` writes gate and up as one `ffn_up` (gate first, GLM-4's layout),
    `down_gain` scales ffn_down."""
    p = f"blk.{i}"
    if fused:
        t.tensor(f"{p}.ffn_up.weight", [D, 2 * ffn], scale=D ** -0.5)
    else:
        t.tensor(f"{p}.ffn_gate.weight", [D, ffn], scale=D ** -0.5)
        t.tensor(f"{p}.ffn_up.weight", [D, ffn], scale=D ** -0.5)
    t.tensor(f"{p}.ffn_down.weight", [ffn, D], scale=down_gain * ffn ** -0.5)


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


def llama(t, layers, tied=False):
    """A whole llama-shaped model: shape keys, embeddings, pre-norm blocks, head. Keys an
    architecture adds after this go after the shape keys, as its converter writes them."""
    shape_keys(t, layers)
    embeddings(t)
    llama_layers(t, layers)
    head(t, tied)
