"""A tiny OLMo 3 (`olmo2` with a sliding window), as Olmo2Model.set_gguf_parameters writes
it: `attention.sliding_window` and `attention.sliding_window_pattern` as one flag per layer
(three window layers, then a global one). The global layer ropes with YaRN, the window
layers plainly with the same base (llama.cpp's olmo2 graph). An 8-token window, so the
23- and 70-token prompts reach past it. See olmo2.py and common.py."""
from common import Tiny, prompt_ids, run_oracle
import dense
import olmo2

LAYERS = 4
WINDOW = 8


def build(gguf, seed):
    t = Tiny(gguf, "olmo2", seed)
    dense.shape_keys(t, LAYERS)
    t.kv("add_sliding_window", WINDOW)
    t.kv("add_sliding_window_pattern", [(i + 1) % 4 != 0 for i in range(LAYERS)])
    t.kv("add_rope_scaling_type", gguf.RopeScalingType.YARN)
    t.kv("add_rope_scaling_factor", 4.0)
    t.kv("add_rope_scaling_orig_ctx_len", 32)
    dense.embeddings(t)
    # Q/K norm weights near 0.5: softer scores, so that summation-order noise (the
    # queries' f16 rounding, the matmuls' order) stays well under the test's tolerance.
    olmo2.layers(t, LAYERS, qk_gain=0.5)
    dense.head(t)
    return t


if __name__ == "__main__":
    run_oracle("olmo2_swa", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
