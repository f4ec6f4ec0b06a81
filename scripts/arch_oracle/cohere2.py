"""A tiny `cohere2` (Command R7B) as convert_hf_to_gguf.py's Cohere2Model writes it: a
parallel block (attention and FFN from one `attn_norm`, no `ffn_norm`), LayerNorm without
bias (`attention.layer_norm_epsilon`), `logit_scale`, the head tied to `token_embd` (no
`output.weight`), and interleaved sliding-window attention: of every 4 layers the first 3
attend through a `sliding_window` of 5 tokens with RoPE, the 4th globally without RoPE
(llama.cpp's default pattern 4). The prompts are far longer than the window, so the
window KV is exercised across chunks and blocks. See common.py."""
from common import Tiny, VOCAB, prompt_ids, run_oracle

D, HEADS, KV_HEADS, FFN, LAYERS, WINDOW = 64, 4, 2, 128, 4, 5
HD = D // HEADS


def build(gguf, seed):
    t = Tiny(gguf, "cohere2", seed)
    t.kv("add_context_length", 512)
    t.kv("add_embedding_length", D)
    t.kv("add_block_count", LAYERS)
    t.kv("add_feed_forward_length", FFN)
    t.kv("add_head_count", HEADS)
    t.kv("add_head_count_kv", KV_HEADS)
    t.kv("add_rope_freq_base", 10000.0)
    t.kv("add_layer_norm_eps", 1e-5)
    t.kv("add_logit_scale", 0.25)
    t.kv("add_sliding_window", WINDOW)
    t.kv("add_vocab_size", VOCAB)
    t.kv("add_rope_dimension_count", HD)
    t.kv("add_rope_scaling_type", gguf.RopeScalingType.NONE)
    t.tensor("token_embd.weight", [D, VOCAB], scale=1.0)
    for i in range(LAYERS):
        p = f"blk.{i}"
        t.norm(f"{p}.attn_norm.weight", D)
        t.tensor(f"{p}.attn_q.weight", [D, HEADS * HD], scale=D ** -0.5)
        t.tensor(f"{p}.attn_k.weight", [D, KV_HEADS * HD], scale=D ** -0.5)
        t.tensor(f"{p}.attn_v.weight", [D, KV_HEADS * HD], scale=D ** -0.5)
        # Outputs 4x the usual scale: with the head tied to the embeddings, a weak block
        # leaves the input token's embedding dominant and the model repeats it.
        t.tensor(f"{p}.attn_output.weight", [HEADS * HD, D], scale=4 * (HEADS * HD) ** -0.5)
        t.tensor(f"{p}.ffn_gate.weight", [D, FFN], scale=D ** -0.5)
        t.tensor(f"{p}.ffn_up.weight", [D, FFN], scale=D ** -0.5)
        t.tensor(f"{p}.ffn_down.weight", [FFN, D], scale=4 * FFN ** -0.5)
    t.norm("output_norm.weight", D)
    return t


if __name__ == "__main__":
    run_oracle("cohere2", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
