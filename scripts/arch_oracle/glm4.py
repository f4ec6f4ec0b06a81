"""A tiny `glm4` (GLM-4-0414) as convert_hf_to_gguf.py's Glm4Model writes it: Q/K/V with
biases, RMS post-norms after attention (`post_attention_norm`) and after the FFN
(`post_ffw_norm`), gate and up fused in `ffn_up` (gate first), "normal" RoPE on half of
each head (`rope.dimension_count` = head_dim × partial_rotary_factor 0.5). See common.py."""
from common import Tiny, VOCAB, prompt_ids, run_oracle

D, HEADS, KV_HEADS, HD, FFN, LAYERS = 64, 4, 2, 16, 96, 2


def build(gguf, seed):
    t = Tiny(gguf, "glm4", seed)
    t.kv("add_context_length", 512)
    t.kv("add_embedding_length", D)
    t.kv("add_block_count", LAYERS)
    t.kv("add_feed_forward_length", FFN)
    t.kv("add_head_count", HEADS)
    t.kv("add_head_count_kv", KV_HEADS)
    t.kv("add_key_length", HD)
    t.kv("add_value_length", HD)
    t.kv("add_rope_dimension_count", HD // 2)
    t.kv("add_rope_freq_base", 10000.0)
    t.kv("add_layer_norm_rms_eps", 1e-5)
    t.kv("add_vocab_size", VOCAB)
    t.tensor("token_embd.weight", [D, VOCAB], scale=1.0)
    for i in range(LAYERS):
        p = f"blk.{i}"
        t.norm(f"{p}.attn_norm.weight", D)
        t.tensor(f"{p}.attn_q.weight", [D, HEADS * HD], scale=D ** -0.5)
        t.tensor(f"{p}.attn_k.weight", [D, KV_HEADS * HD], scale=D ** -0.5)
        t.tensor(f"{p}.attn_v.weight", [D, KV_HEADS * HD], scale=D ** -0.5)
        t.tensor(f"{p}.attn_q.bias", [HEADS * HD], scale=0.3)
        t.tensor(f"{p}.attn_k.bias", [KV_HEADS * HD], scale=0.3)
        t.tensor(f"{p}.attn_v.bias", [KV_HEADS * HD], scale=0.3)
        t.tensor(f"{p}.attn_output.weight", [HEADS * HD, D], scale=(HEADS * HD) ** -0.5)
        t.norm(f"{p}.post_attention_norm.weight", D)
        t.norm(f"{p}.ffn_norm.weight", D)
        t.tensor(f"{p}.ffn_up.weight", [D, 2 * FFN], scale=D ** -0.5)
        t.tensor(f"{p}.ffn_down.weight", [FFN, D], scale=FFN ** -0.5)
        t.norm(f"{p}.post_ffw_norm.weight", D)
    t.norm("output_norm.weight", D)
    t.tensor("output.weight", [D, VOCAB], scale=D ** -0.5 * 4)
    return t


if __name__ == "__main__":
    run_oracle("glm4", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
