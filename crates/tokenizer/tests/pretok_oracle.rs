//! Every pre-tokenizer against llama.cpp: testdata/pretok/<pre>.gguf carries one byte-level
//! BPE vocabulary (merges learned across word boundaries, so a different split gives
//! different ids) with that `tokenizer.ggml.pre`; testdata/pretok/<pre>.json holds
//! llama.cpp's `/tokenize` ids (`add_special` on, `parse_special` off) for a set of tricky
//! strings. Both are written by scripts/pretok_oracle.py.

use folio_gguf::GgufFile;
use folio_tokenizer::Tokenizer;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/pretok")
}

/// Mismatches of folio's ids against llama.cpp's for `pre`, one line each.
fn check(pre: &str) -> Vec<String> {
    let json = std::fs::read_to_string(dir().join(format!("{pre}.json")))
        .unwrap_or_else(|e| panic!("testdata/pretok/{pre}.json: {e}"));
    let doc: serde_json::Value = serde_json::from_str(&json).expect("fixture json");
    let f = GgufFile::open(&dir().join(format!("{pre}.gguf"))).expect("open fixture");
    let tok = Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("{pre}: {e}"));
    let cases = doc["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    let mut bad = Vec::new();
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let want: Vec<u32> = case["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_u64().expect("id") as u32)
            .collect();
        let got = tok.encode(text, false).expect("encode");
        if got != want {
            bad.push(format!(
                "{pre} {text:?}:\n  folio     {got:?}\n  llama.cpp {want:?}"
            ));
        }
    }
    bad
}

#[test]
fn every_pre_tokenizer_equals_llama_cpp() {
    let mut pres: Vec<String> = std::fs::read_dir(dir())
        .expect("testdata/pretok")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".json").map(str::to_owned)
        })
        .collect();
    pres.sort();
    for required in [
        "tekken",
        "gpt-4o",
        "smollm",
        "deepseek-v3",
        "deepseek-llm",
        "glm4",
        "kimi-k2",
    ] {
        assert!(
            pres.iter().any(|p| p == required),
            "no fixture for {required}"
        );
    }
    let bad: Vec<String> = pres.iter().flat_map(|p| check(p)).collect();
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
    eprintln!(
        "{} pre-tokenizers equal llama.cpp's ids: {}",
        pres.len(),
        pres.join(", ")
    );
}

#[test]
fn an_unknown_pre_is_a_load_error_naming_it() {
    use folio_tokenizer::TokenizerSpec;
    let spec = TokenizerSpec {
        model: "gpt2".into(),
        pre: Some("no-such-pre".into()),
        tokens: vec!["a".into()],
        ..TokenizerSpec::default()
    };
    let err = Tokenizer::from_spec(spec)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("no-such-pre"), "{err}");
}

#[test]
fn glm4_has_no_bos() {
    // llama.cpp drops GLM's BOS id; the fixture names one (id 1).
    let f = GgufFile::open(&dir().join("glm4.gguf")).expect("fixture");
    assert_eq!(Tokenizer::from_gguf(&f).unwrap().bos_id(), None);
    let f = GgufFile::open(&dir().join("dbrx.gguf")).expect("fixture");
    assert_eq!(Tokenizer::from_gguf(&f).unwrap().bos_id(), Some(1));
}
