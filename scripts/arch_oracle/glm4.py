"""A tiny `glm4` (GLM-4-0414) as convert_hf_to_gguf.py's Glm4Model writes it: Q/K/V with
biases, RMS post-norms after attention (`post_attention_norm`) and after the FFN
(`post_ffw_norm`), gate and up fused in `ffn_up` (gate first), "normal" RoPE on half of
each head (`rope.dimension_count` = head_dim × partial_rotary_factor 0.5). See common.py."""
from common import Tiny, prompt_ids, run_oracle
import dense

FFN, LAYERS = 96, 2


def build(gguf, seed):
    t = Tiny(gguf, "glm4", seed)
    dense.shape_keys(t, LAYERS, ffn=FFN, head_dims=True, rope_dim=dense.HD // 2)
    dense.embeddings(t)
    for i in range(LAYERS):
        p = f"blk.{i}"
        t.norm(f"{p}.attn_norm.weight", dense.D)
        dense.attention(t, i, bias=0.3)
        t.norm(f"{p}.post_attention_norm.weight", dense.D)
        t.norm(f"{p}.ffn_norm.weight", dense.D)
        dense.ffn(t, i, ffn=FFN, fused=True)
        t.norm(f"{p}.post_ffw_norm.weight", dense.D)
    dense.head(t)
    return t


if __name__ == "__main__":
    run_oracle("glm4", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
