"""A tiny `olmo2`: no norm before attention or the FFN; RMSNorm after each
(`post_attention_norm`, `post_ffw_norm`) before its residual add; Q and K normed over the
whole projection (`attn_q_norm` of n_head*head_dim, `attn_k_norm` of n_head_kv*head_dim);
NeoX RoPE; an untied head (llama.cpp requires `output.weight`). See common.py."""
from common import Tiny, VOCAB, prompt_ids, run_oracle
import dense

LAYERS = 2


def build(gguf, seed):
    t = Tiny(gguf, "olmo2", seed)
    dense.shape_keys(t, LAYERS)
    t.tensor("token_embd.weight", [dense.D, VOCAB], scale=1.0)
    for i in range(LAYERS):
        p = f"blk.{i}"
        dense.attention(t, i)
        t.norm(f"{p}.attn_q_norm.weight", dense.HEADS * dense.HD)
        t.norm(f"{p}.attn_k_norm.weight", dense.KV_HEADS * dense.HD)
        t.norm(f"{p}.post_attention_norm.weight", dense.D)
        dense.ffn(t, i)
        t.norm(f"{p}.post_ffw_norm.weight", dense.D)
    dense.head(t)
    return t


if __name__ == "__main__":
    run_oracle("olmo2", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
