//! Gemma 3 270M (Q4_K_M, from the catalogue, fetched on first use) against llama.cpp
//! (testdata/gemma3-greedy.json, made by scripts/llamacpp_greedy.py --prompts gemma3 from
//! llama.cpp's server on the same file): SentencePiece prompt ids identical, and 32 greedy tokens identical up to the first
//! step where llama.cpp's own top-1/top-2 log-probability gap is within the rounding noise
//! the runs measure (`greedy_ref::check_model_with`). One prompt is
//! ~2,000 tokens, four times the 512-token sliding window, and asks about its beginning
//! (which only the global layers still see).

mod greedy_ref;
use greedy_ref::{check, fetched};

#[test]
fn gemma3_270m_matches_llama_cpp() {
    check(
        "gemma3-270m Q4_K_M",
        include_str!("../../../testdata/gemma3-greedy.json"),
        fetched("gemma3-270m"),
    );
}
