"""A tiny dense `ernie4_5` (ERNIE 4.5 0.3B): llama's block with llama's adjacent-pair RoPE,
GQA, a tied head. See common.py."""
from common import Tiny, prompt_ids, run_oracle
import dense

LAYERS = 2


def build(gguf, seed):
    t = Tiny(gguf, "ernie4_5", seed)
    dense.llama(t, LAYERS, tied=True)
    return t


if __name__ == "__main__":
    run_oracle("ernie4_5", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
