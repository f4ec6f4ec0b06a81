"""A tiny `granite` (Granite 3.x dense): llama's block with the four multipliers
GraniteModel.set_gguf_parameters writes: `embedding_scale` on the token embeddings,
`residual_scale` on each branch before its residual add, `attention.scale` in place of
1/sqrt(head_dim), and `logit_scale` dividing the logits. No head_dim key (Granite's
converter drops it). See common.py."""
from common import Tiny, prompt_ids, run_oracle
import dense

LAYERS = 2


def build(gguf, seed):
    t = Tiny(gguf, "granite", seed)
    dense.llama(t, LAYERS, tied=True)
    t.kv("add_attention_scale", 0.1)
    t.kv("add_embedding_scale", 12.0)
    t.kv("add_residual_scale", 0.22)
    t.kv("add_logit_scale", 2.0)
    return t


if __name__ == "__main__":
    run_oracle("granite", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
