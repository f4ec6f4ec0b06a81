"""A tiny `olmo2`: no norm before attention or the FFN; RMSNorm after each
(`post_attention_norm`, `post_ffw_norm`) before its residual add; Q and K normed over the
whole projection (`attn_q_norm` of n_head*head_dim, `attn_k_norm` of n_head_kv*head_dim);
NeoX RoPE; an untied head (llama.cpp requires `output.weight`). See common.py."""
from common import Tiny, prompt_ids, run_oracle
import dense

LAYERS = 2


def layers(t, n, qk_gain=1.0):
    """OLMo 2's blocks: attention, whole-projection Q/K norms (scaled by `qk_gain`), norms
    after attention and after the FFN."""
    for i in range(n):
        p = f"blk.{i}"
        dense.attention(t, i)
        for name, width in [("attn_q_norm", dense.HEADS), ("attn_k_norm", dense.KV_HEADS)]:
            w = t.norm(f"{p}.{name}.weight", width * dense.HD)
            if qk_gain != 1.0:
                w[...] *= qk_gain
        t.norm(f"{p}.post_attention_norm.weight", dense.D)
        dense.ffn(t, i)
        t.norm(f"{p}.post_ffw_norm.weight", dense.D)


def build(gguf, seed):
    t = Tiny(gguf, "olmo2", seed)
    dense.shape_keys(t, LAYERS)
    dense.embeddings(t)
    layers(t, LAYERS)
    dense.head(t)
    return t


if __name__ == "__main__":
    run_oracle("olmo2", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
