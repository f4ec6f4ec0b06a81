//! Real vocabularies against llama.cpp's own tokenizer test data: its source tree's
//! `models/ggml-vocab-<name>.gguf` with `.inp` (test strings) and `.out` (the ids its
//! test-tokenizer-0 asserts, `add_special` and `parse_special` off). The files are large
//! and not part of this repository: set `FOLIO_LLAMA_CPP_DIR` to a llama.cpp source tree
//! (e.g. the peer build's vendor/llama.cpp); without it the test skips with a notice.

use folio_gguf::GgufFile;
use folio_tokenizer::Tokenizer;
use std::path::PathBuf;

/// The BPE vocabularies llama.cpp ships tests for whose `pre` folio knows.
const VOCABS: &[&str] = &[
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gpt-2",
    "llama-bpe",
    "mpt",
    "qwen2",
    "refact",
    "starcoder",
];

/// (string, ids) pairs as test-tokenizer-0 reads them.
fn cases(inp: &str, out: &str) -> Vec<(String, Vec<u32>)> {
    const SEP: &str = "\n__ggml_vocab_test__\n";
    // test-tokenizer-0 reads no empty case after a final separator.
    let strings: Vec<&str> = inp.strip_suffix(SEP).unwrap_or(inp).split(SEP).collect();
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().expect("id"))
                .collect()
        })
        .collect();
    assert_eq!(strings.len(), ids.len(), "inp/out counts");
    strings.into_iter().map(str::to_owned).zip(ids).collect()
}

#[test]
fn llama_cpp_vocab_tests() {
    let Some(root) = std::env::var_os("FOLIO_LLAMA_CPP_DIR") else {
        eprintln!("skipped: set FOLIO_LLAMA_CPP_DIR to a llama.cpp source tree");
        return;
    };
    let models = PathBuf::from(root).join("models");
    let mut bad = Vec::new();
    let mut checked = 0;
    for name in VOCABS {
        let path = models.join(format!("ggml-vocab-{name}.gguf"));
        let read = |ext: &str| std::fs::read_to_string(format!("{}.{ext}", path.display()));
        let (Ok(inp), Ok(out)) = (read("inp"), read("out")) else {
            eprintln!("{name}: no test files, skipped");
            continue;
        };
        let f = GgufFile::open(&path).expect("vocab file");
        let tok = Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (text, want) in cases(&inp, &out) {
            let mut got = tok.encode(&text, false).expect("encode");
            if tok.add_bos() && tok.bos_id().is_some() && got.first() == tok.bos_id().as_ref() {
                got.remove(0);
            }
            checked += 1;
            if got != want {
                bad.push(format!(
                    "{name} {text:?}:\n  folio     {got:?}\n  llama.cpp {want:?}"
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {checked} differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
    eprintln!(
        "{checked} strings over {} vocabularies equal llama.cpp's",
        VOCABS.len()
    );
}
