"""The oracle's `deepseek2` (multi-head latent attention + MoE), as convert_hf_to_gguf.py's
DeepseekV2Model writes it (MLA split: attn_k_b transposed, attn_v_b; head_count_kv 1,
key_length = kv_lora_rank + rope, value_length = kv_lora_rank, key/value_length_mla the
decompressed head sizes). Two files:

- deepseek2: V2-Lite style: direct attn_q (q_lora_rank 0), one leading dense layer, then
  MoE layers with softmax gating and a shared expert.
- deepseek2_v3: V3/R1/Kimi K2 style: low-rank Q (attn_q_a, attn_q_a_norm, attn_q_b),
  sigmoid gating with the exp_probs_b selection bias, group-limited routing,
  expert_weights_norm and expert_weights_scale, a shared expert, YaRN with
  yarn_log_multiplier (mscale_all_dim). See common.py."""
from common import Tiny, VOCAB, prompt_ids, run_oracle

D, HEADS, LAYERS, FFN = 64, 4, 3, 128
NOPE, ROPE, V = 16, 16, 16


def build_with(gguf, seed, q_lora, kv_lora, n_expert, v3):
    t = Tiny(gguf, "deepseek2", seed)
    ff_exp = 16 if v3 else 32
    t.kv("add_context_length", 512)
    t.kv("add_embedding_length", D)
    t.kv("add_block_count", LAYERS)
    t.kv("add_feed_forward_length", FFN)
    t.kv("add_head_count", HEADS)
    t.kv("add_head_count_kv", 1)
    t.kv("add_rope_freq_base", 10000.0)
    t.kv("add_layer_norm_rms_eps", 1e-6)
    t.kv("add_vocab_size", VOCAB)
    t.kv("add_leading_dense_block_count", 1)
    t.kv("add_q_lora_rank", q_lora)
    t.kv("add_kv_lora_rank", kv_lora)
    t.kv("add_key_length", kv_lora + ROPE)
    t.kv("add_value_length", kv_lora)
    t.kv("add_key_length_mla", NOPE + ROPE)
    t.kv("add_value_length_mla", V)
    t.kv("add_expert_feed_forward_length", ff_exp)
    t.kv("add_expert_count", n_expert)
    t.kv("add_expert_used_count", 2)
    t.kv("add_expert_shared_count", 1)
    t.kv("add_rope_dimension_count", ROPE)
    if v3:
        t.kv("add_expert_weights_scale", 2.5)
        t.kv("add_expert_weights_norm", True)
        t.kv("add_expert_gating_func", gguf.ExpertGatingFuncType.SIGMOID)
        t.kv("add_expert_group_count", 4)
        t.kv("add_expert_group_used_count", 2)
        t.kv("add_rope_scaling_type", gguf.RopeScalingType.YARN)
        t.kv("add_rope_scaling_factor", 4.0)
        t.kv("add_rope_scaling_orig_ctx_len", 128)
        t.kv("add_rope_scaling_yarn_log_mul", 0.1 * 1.0)
    else:
        t.kv("add_expert_gating_func", gguf.ExpertGatingFuncType.SOFTMAX)
    t.tensor("token_embd.weight", [D, VOCAB], scale=1.0)
    for i in range(LAYERS):
        p = f"blk.{i}"
        t.norm(f"{p}.attn_norm.weight", D)
        if q_lora:
            t.tensor(f"{p}.attn_q_a.weight", [D, q_lora], scale=D ** -0.5)
            t.norm(f"{p}.attn_q_a_norm.weight", q_lora)
            t.tensor(f"{p}.attn_q_b.weight", [q_lora, HEADS * (NOPE + ROPE)], scale=q_lora ** -0.5)
        else:
            t.tensor(f"{p}.attn_q.weight", [D, HEADS * (NOPE + ROPE)], scale=D ** -0.5)
        t.tensor(f"{p}.attn_kv_a_mqa.weight", [D, kv_lora + ROPE], scale=D ** -0.5)
        t.norm(f"{p}.attn_kv_a_norm.weight", kv_lora)
        t.tensor(f"{p}.attn_k_b.weight", [NOPE, kv_lora, HEADS], scale=NOPE ** -0.5)
        t.tensor(f"{p}.attn_v_b.weight", [kv_lora, V, HEADS], scale=kv_lora ** -0.5)
        t.tensor(f"{p}.attn_output.weight", [HEADS * V, D], scale=(HEADS * V) ** -0.5)
        t.norm(f"{p}.ffn_norm.weight", D)
        if i < 1:
            t.tensor(f"{p}.ffn_gate.weight", [D, FFN], scale=D ** -0.5)
            t.tensor(f"{p}.ffn_up.weight", [D, FFN], scale=D ** -0.5)
            t.tensor(f"{p}.ffn_down.weight", [FFN, D], scale=FFN ** -0.5)
        else:
            t.tensor(f"{p}.ffn_gate_inp.weight", [D, n_expert], scale=D ** -0.5 * 4)
            if v3:
                t.tensor(f"{p}.exp_probs_b.bias", [n_expert], scale=0.1)
            t.tensor(f"{p}.ffn_gate_exps.weight", [D, ff_exp, n_expert], scale=D ** -0.5)
            t.tensor(f"{p}.ffn_up_exps.weight", [D, ff_exp, n_expert], scale=D ** -0.5)
            t.tensor(f"{p}.ffn_down_exps.weight", [ff_exp, D, n_expert], scale=ff_exp ** -0.5)
            t.tensor(f"{p}.ffn_gate_shexp.weight", [D, ff_exp], scale=D ** -0.5)
            t.tensor(f"{p}.ffn_up_shexp.weight", [D, ff_exp], scale=D ** -0.5)
            t.tensor(f"{p}.ffn_down_shexp.weight", [ff_exp, D], scale=ff_exp ** -0.5)
    t.norm("output_norm.weight", D)
    t.tensor("output.weight", [D, VOCAB], scale=D ** -0.5 * (2 if v3 else 4))
    return t


PROMPTS = [prompt_ids(1, 5), prompt_ids(2, 23), prompt_ids(3, 70)]

if __name__ == "__main__":
    run_oracle("deepseek2", lambda g, s: build_with(g, s, 0, 32, 4, False), PROMPTS)
    run_oracle("deepseek2_v3", lambda g, s: build_with(g, s + 3, 32, 48, 8, True), PROMPTS)
