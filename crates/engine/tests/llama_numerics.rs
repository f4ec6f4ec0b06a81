//! `--numerics llama` on real files against llama.cpp (testdata/qwen-coder-greedy-*.json,
//! made by scripts/llamacpp_greedy.py from llama.cpp b11312's server on the same files,
//! run as `GGML_CPU_TILED_MM=0 llama-server -fa off --no-repack`: its reference arithmetic,
//! `ggml_vec_dot_<type>_q8_K` for every matrix and the non-flash attention): every greedy
//! token identical, no near-tie allowance, and llama.cpp's top-5 log-probabilities
//! (relative to its top-1) reproduced to the file's 4 decimals.
//!
//! Q4_0, Q5_0 and Q8_0 run ggml's q8_0 lane sums (Q5_0 as the Q8_0 bytes `code - 16`); the K-quant, IQ2_XXS, ternary and 1-bit
//! matrices llama.cpp's `ggml_vec_dot_*_q8_K`
//! (activations quantized to Q8_K per 256 values, its AVX2 lane sums;
//! `folio_kernels::matmul` `ggml_k`). Files from `$FOLIO_QUANTS_DIR`
//! (scripts/make_quants.sh) and the catalogue; a missing file skips its case with a printed
//! reason.

use folio_kernels::matmul::Sums;
use std::path::PathBuf;

mod greedy_ref;
use greedy_ref::{check_model_with, fetched, quant};

/// The file's log-probabilities are rounded to 4 decimals: a difference of two of them is
/// off by up to 1e-4.
const LOGPROB_TOLERANCE: f64 = 1e-4 + 1e-6;

fn check(label: &str, reference: &str, path: Result<PathBuf, String>) {
    let Some((f, mut model)) = greedy_ref::load(label, path) else {
        return;
    };
    model.set_sums(Sums::Ggml);
    check_model_with(label, reference, &f, &model, None, Some(LOGPROB_TOLERANCE));
}

/// The catalogue's Q4_K_M (Q4_K and Q6_K matrices), fetched by `folio models`; skipped when
/// it is not downloaded.
#[test]
fn q4_k_m_identical_to_llama_cpp() {
    check(
        "Q4_K_M",
        include_str!("../../../testdata/qwen-coder-greedy-q4_k_m-ref.json"),
        greedy_ref::catalogue("qwen2.5-coder-1.5b"),
    );
}

/// Q4_0 matrices (Q6_K head).
#[test]
fn q4_0_identical_to_llama_cpp() {
    check(
        "Q4_0",
        include_str!("../../../testdata/qwen-coder-greedy-q4_0-ref.json"),
        quant("qwen-q4_0.gguf"),
    );
}

/// Q8_0 matrices.
#[test]
fn q8_0_identical_to_llama_cpp() {
    check(
        "Q8_0",
        include_str!("../../../testdata/qwen-coder-greedy-q8_0-ref.json"),
        quant("qwen-q8_0.gguf"),
    );
}

/// Q5_K and Q6_K matrices.
#[test]
fn q5_k_m_identical_to_llama_cpp() {
    check(
        "Q5_K_M",
        include_str!("../../../testdata/qwen-coder-greedy-q5_k_m.json"),
        quant("qwen-q5_k_m.gguf"),
    );
}

/// Q6_K matrices only.
#[test]
fn q6_k_identical_to_llama_cpp() {
    check(
        "Q6_K",
        include_str!("../../../testdata/qwen-coder-greedy-q6_k.json"),
        quant("qwen-q6_k.gguf"),
    );
}

/// TQ1_0 matrices, the Q6_K head.
#[test]
fn tq1_0_identical_to_llama_cpp() {
    check(
        "TQ1_0",
        include_str!("../../../testdata/qwen-coder-greedy-tq1_0.json"),
        quant("qwen-tq1_0.gguf"),
    );
}

/// TQ2_0 matrices, the Q6_K head.
#[test]
fn tq2_0_identical_to_llama_cpp() {
    check(
        "TQ2_0",
        include_str!("../../../testdata/qwen-coder-greedy-tq2_0.json"),
        quant("qwen-tq2_0.gguf"),
    );
}

/// llama-quantize's IQ1_S mix: IQ1_S, IQ2_XXS, Q2_K, Q4_K matrices, the Q5_K head.
#[test]
fn iq1_s_identical_to_llama_cpp() {
    check(
        "IQ1_S",
        include_str!("../../../testdata/qwen-coder-greedy-iq1_s.json"),
        quant("qwen-iq1_s.gguf"),
    );
}

/// llama-quantize's IQ1_M mix: IQ1_M, IQ2_XXS, Q2_K, Q4_K matrices, the Q5_K head.
#[test]
fn iq1_m_identical_to_llama_cpp() {
    check(
        "IQ1_M",
        include_str!("../../../testdata/qwen-coder-greedy-iq1_m.json"),
        quant("qwen-iq1_m.gguf"),
    );
}

/// Gemma 3 270M Q4_K_M (Q5_0, Q8_0, Q4_K and Q6_K matrices; the catalogue file, fetched on
/// first use): its GELU table, Q/K norms, sliding-window and global layers and 262k-token
/// head, the 2,047-token prompt included.
#[test]
fn gemma3_270m_identical_to_llama_cpp() {
    check(
        "gemma3-270m Q4_K_M",
        include_str!("../../../testdata/gemma3-greedy-ref.json"),
        fetched("gemma3-270m"),
    );
}
