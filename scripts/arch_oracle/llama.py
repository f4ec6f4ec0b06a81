"""The oracle's example architecture: a tiny `llama` (GQA, RoPE, SwiGLU), as
convert_hf_to_gguf.py writes it. See common.py."""
from common import Tiny, prompt_ids, run_oracle
import dense

LAYERS = 2


def build(gguf, seed):
    t = Tiny(gguf, "llama", seed)
    dense.llama(t, LAYERS)
    return t


if __name__ == "__main__":
    run_oracle("llama", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
