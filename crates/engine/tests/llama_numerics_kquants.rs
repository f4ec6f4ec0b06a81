//! `--numerics llama` on K-quant files against llama.cpp (testdata/qwen-coder-greedy-*.json,
//! made by scripts/llamacpp_greedy.py from llama.cpp's server on the same files): every
//! greedy token identical, no near-tie allowance, and llama.cpp's top-5 log-probabilities
//! (relative to its top-1) reproduced to the file's 4 decimals.
//!
//! Q5_K and Q6_K matrices then run llama.cpp's own arithmetic (activations quantized to
//! Q8_K per 256 values, its AVX2 lane sums; `folio_kernels::matmul` `ggml_k`). Files from
//! `$FOLIO_QUANTS_DIR` (scripts/make_quants.sh); a missing file skips its case with a
//! printed reason.

use folio_gguf::GgufFile;
use folio_kernels::matmul::Sums;
use folio_model::Model;
use std::path::PathBuf;

mod greedy_ref;
use greedy_ref::check_model_with;

/// The file's log-probabilities are rounded to 4 decimals: a difference of two of them is
/// off by up to 1e-4.
const LOGPROB_TOLERANCE: f64 = 1e-4 + 1e-6;

fn quant(file: &str) -> Result<PathBuf, String> {
    let dir = std::env::var_os("FOLIO_QUANTS_DIR")
        .ok_or("FOLIO_QUANTS_DIR is not set (scripts/make_quants.sh makes the files)")?;
    let p = PathBuf::from(dir).join(file);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{} does not exist", p.display()))
    }
}

fn check(label: &str, reference: &str, path: Result<PathBuf, String>) {
    let path = match path {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipping {label}: {why}");
            return;
        }
    };
    let f = GgufFile::open(&path).expect("open model");
    let mut model = Model::from_gguf(&f).expect("load model");
    model.set_sums(Sums::Ggml);
    check_model_with(label, reference, &f, &model, None, Some(LOGPROB_TOLERANCE));
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
