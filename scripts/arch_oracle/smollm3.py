"""A tiny `smollm3`: llama's block, RoPE skipped in every fourth layer (llama.cpp's
`n_no_rope_layer_step` = 4, fixed by the architecture): 4 layers, so layer 3 is NoPE.
Tied head, as SmolLM3-3B. See common.py."""
from common import Tiny, prompt_ids, run_oracle
import dense

LAYERS = 4


def build(gguf, seed):
    t = Tiny(gguf, "smollm3", seed)
    dense.llama(t, LAYERS, tied=True)
    return t


if __name__ == "__main__":
    run_oracle("smollm3", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
