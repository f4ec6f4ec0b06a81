"""A tiny `cohere2` (Command R7B) as convert_hf_to_gguf.py's Cohere2Model writes it: a
parallel block (attention and FFN from one `attn_norm`, no `ffn_norm`), LayerNorm without
bias (`attention.layer_norm_epsilon`), `logit_scale`, the head tied to `token_embd` (no
`output.weight`), and interleaved sliding-window attention: of every 4 layers the first 3
attend through a `sliding_window` of 5 tokens with RoPE, the 4th globally without RoPE
(llama.cpp's default pattern 4). The prompts are far longer than the window, so the
window KV is exercised across chunks and blocks. See common.py."""
from common import Tiny, prompt_ids, run_oracle
import dense

LAYERS, WINDOW = 4, 5


def build(gguf, seed):
    t = Tiny(gguf, "cohere2", seed)
    dense.shape_keys(t, LAYERS, eps="add_layer_norm_eps")
    t.kv("add_logit_scale", 0.25)
    t.kv("add_sliding_window", WINDOW)
    t.kv("add_rope_scaling_type", gguf.RopeScalingType.NONE)
    dense.embeddings(t)
    for i in range(LAYERS):
        t.norm(f"blk.{i}.attn_norm.weight", dense.D)
        # Outputs 4x the usual scale: with the head tied to the embeddings, a weak block
        # leaves the input token's embedding dominant and the model repeats it.
        dense.attention(t, i, out_gain=4)
        dense.ffn(t, i, down_gain=4)
    dense.head(t, tied=True)
    return t


if __name__ == "__main__":
    run_oracle("cohere2", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
