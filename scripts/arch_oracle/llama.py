"""The oracle's example architecture: a tiny `llama` (GQA, RoPE, SwiGLU), as
convert_hf_to_gguf.py writes it. See common.py."""
from common import Tiny, VOCAB, prompt_ids, run_oracle

D, HEADS, KV_HEADS, HD, FFN, LAYERS = 64, 4, 2, 16, 128, 2


def build(gguf, seed):
    t = Tiny(gguf, "llama", seed)
    t.kv("add_context_length", 512)
    t.kv("add_embedding_length", D)
    t.kv("add_block_count", LAYERS)
    t.kv("add_feed_forward_length", FFN)
    t.kv("add_head_count", HEADS)
    t.kv("add_head_count_kv", KV_HEADS)
    t.kv("add_rope_dimension_count", HD)
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
        t.tensor(f"{p}.attn_output.weight", [HEADS * HD, D], scale=(HEADS * HD) ** -0.5)
        t.norm(f"{p}.ffn_norm.weight", D)
        t.tensor(f"{p}.ffn_gate.weight", [D, FFN], scale=D ** -0.5)
        t.tensor(f"{p}.ffn_up.weight", [D, FFN], scale=D ** -0.5)
        t.tensor(f"{p}.ffn_down.weight", [FFN, D], scale=FFN ** -0.5)
    t.norm("output_norm.weight", D)
    t.tensor("output.weight", [D, VOCAB], scale=D ** -0.5 * 4)
    return t


if __name__ == "__main__":
    run_oracle("llama", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
