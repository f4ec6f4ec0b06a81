"""A tiny `mistral3` as Ministral3Model.set_gguf_parameters writes it: llama's block, YaRN
(`rope.scaling.type` yarn, factor, original context, beta fast/slow) with
`rope.scaling.yarn_log_multiplier` (HF's mscale_all_dim), and Llama 4's attention
temperature `attention.temperature_scale` (HF's llama_4_scaling_beta), whose step is the
original context. The original context is 32 tokens here so that the 70-token prompt
crosses two steps of the temperature (positions 32 and 64) and YaRN's ramp covers pairs.
See common.py."""
from common import Tiny, prompt_ids, run_oracle
import dense

LAYERS = 2
ORIG_CTX = 32


def build(gguf, seed):
    t = Tiny(gguf, "mistral3", seed)
    dense.llama(t, LAYERS)
    t.kv("add_rope_scaling_type", gguf.RopeScalingType.YARN)
    t.kv("add_rope_scaling_factor", 4.0)
    t.kv("add_rope_scaling_orig_ctx_len", ORIG_CTX)
    t.kv("add_rope_scaling_yarn_beta_fast", 32.0)
    t.kv("add_rope_scaling_yarn_beta_slow", 1.0)
    t.kv("add_rope_scaling_yarn_log_mul", 1.0)
    t.kv("add_attn_temperature_scale", 0.5)
    return t


if __name__ == "__main__":
    run_oracle("mistral3", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
