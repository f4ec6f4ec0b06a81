"""A tiny `gpt-oss` (GPT-OSS 20B/120B's architecture) as llama.cpp's converter
(conversion/gpt_oss.py over conversion/base.py) writes it: Q/K/V/O biases, one attention
sink per head, a sliding window on every other layer (layer 0 first; the window shorter
than the prompts), YaRN RoPE, and a MoE FFN with router and per-expert biases and the
`swiglu_oai` activation. The experts are F32 here (llama.cpp accepts F32/F16/Q8_0 experts
for gpt-oss as well as MXFP4): with F16 experts llama.cpp rounds the activations to f16
before the expert matmuls and folio's F16 matmul does not, which moves this model's
log-probabilities by ~1e-2, past the oracle's tolerance. See common.py."""
from common import Tiny, VOCAB, prompt_ids, run_oracle

D, HEADS, KV_HEADS, HD, LAYERS = 64, 4, 2, 16, 3
EXPERTS, USED, FFN = 4, 2, 32
WINDOW = 8


def build(gguf, seed):
    t = Tiny(gguf, "gpt-oss", seed)
    t.kv("add_block_count", LAYERS)
    t.kv("add_context_length", 512)
    t.kv("add_embedding_length", D)
    t.kv("add_feed_forward_length", FFN)
    t.kv("add_head_count", HEADS)
    t.kv("add_head_count_kv", KV_HEADS)
    # HF's rope_scaling {"rope_type": "yarn", "factor", "original_max_position_embeddings",
    # "beta_fast", "beta_slow"}, as base.py writes it.
    t.kv("add_rope_scaling_type", gguf.RopeScalingType.YARN)
    t.kv("add_rope_scaling_factor", 8.0)
    t.kv("add_rope_scaling_orig_ctx_len", 64)
    t.kv("add_rope_scaling_yarn_beta_fast", 32.0)
    t.kv("add_rope_scaling_yarn_beta_slow", 1.0)
    t.kv("add_rope_freq_base", 150000.0)
    t.kv("add_layer_norm_rms_eps", 1e-5)
    t.kv("add_expert_count", EXPERTS)
    t.kv("add_expert_used_count", USED)
    t.kv("add_key_length", HD)
    t.kv("add_value_length", HD)
    # GptOssModel.set_gguf_parameters.
    t.kv("add_sliding_window", WINDOW)
    t.kv("add_expert_feed_forward_length", FFN)
    t.tensor("token_embd.weight", [D, VOCAB], scale=1.0)
    for i in range(LAYERS):
        p = f"blk.{i}"
        t.norm(f"{p}.attn_norm.weight", D)
        t.tensor(f"{p}.attn_q.weight", [D, HEADS * HD], scale=D ** -0.5)
        t.tensor(f"{p}.attn_q.bias", [HEADS * HD], scale=0.2)
        t.tensor(f"{p}.attn_k.weight", [D, KV_HEADS * HD], scale=D ** -0.5)
        t.tensor(f"{p}.attn_k.bias", [KV_HEADS * HD], scale=0.2)
        t.tensor(f"{p}.attn_v.weight", [D, KV_HEADS * HD], scale=D ** -0.5)
        t.tensor(f"{p}.attn_v.bias", [KV_HEADS * HD], scale=0.2)
        t.tensor(f"{p}.attn_output.weight", [HEADS * HD, D], scale=(HEADS * HD) ** -0.5)
        t.tensor(f"{p}.attn_output.bias", [D], scale=0.2)
        # Sinks around the scores' size, so each head's denominator moves.
        t.tensor(f"{p}.attn_sinks.weight", [HEADS], scale=1.0)
        t.norm(f"{p}.post_attention_norm.weight", D)
        t.tensor(f"{p}.ffn_gate_inp.weight", [D, EXPERTS], scale=D ** -0.5 * 2)
        t.tensor(f"{p}.ffn_gate_inp.bias", [EXPERTS], scale=0.5)
        t.tensor(f"{p}.ffn_gate_exps.weight", [D, FFN, EXPERTS], scale=D ** -0.5 * 2)
        t.tensor(f"{p}.ffn_gate_exps.bias", [FFN, EXPERTS], scale=0.2)
        t.tensor(f"{p}.ffn_up_exps.weight", [D, FFN, EXPERTS], scale=D ** -0.5 * 2)
        t.tensor(f"{p}.ffn_up_exps.bias", [FFN, EXPERTS], scale=0.2)
        t.tensor(f"{p}.ffn_down_exps.weight", [FFN, D, EXPERTS], scale=FFN ** -0.5)
        t.tensor(f"{p}.ffn_down_exps.bias", [D, EXPERTS], scale=0.2)
    t.norm("output_norm.weight", D)
    t.tensor("output.weight", [D, VOCAB], scale=D ** -0.5 * 4)
    return t


if __name__ == "__main__":
    run_oracle("gpt-oss", build, [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)])
