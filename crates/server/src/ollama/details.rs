//! What Ollama says about a model file, read from its GGUF header: `details` (format,
//! family, parameter size, quantization), `model_info` (the metadata), the chat template,
//! `capabilities`, and the file's digest and time.

use folio_gguf::{GgufFile, Value as G};
use serde_json::{json, Map, Value};
use std::path::Path;

/// Arrays longer than this (vocabularies, merges) are `null` in `model_info` unless
/// `verbose`, as Ollama does.
const SHORT_ARRAY: usize = 64;

/// One model file's description.
pub struct Details {
    pub details: Value,
    pub model_info: Map<String, Value>,
    pub template: String,
    pub capabilities: Vec<&'static str>,
    /// `sha256:…` when known (the catalogue's hash, or the one fetch verified), else "".
    pub digest: String,
    pub modified_at: String,
    pub size: u64,
}

/// Reads `path`'s header (the tensors stay unread: the file is mapped).
pub fn read(path: &Path, verbose: bool) -> Result<Details, String> {
    let f = GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let params: u64 = f.tensors().iter().map(|t| t.n_elements()).sum();
    let arch = f
        .get("general.architecture")
        .and_then(G::as_str)
        .unwrap_or("")
        .to_string();
    let mut model_info = Map::new();
    for (k, v) in f.metadata() {
        // The template is `template`; the vocabulary is not "info".
        if k == "tokenizer.chat_template" {
            continue;
        }
        let long = matches!(v, G::Array(a) if a.len() > SHORT_ARRAY);
        model_info.insert(
            k.clone(),
            if long && !verbose {
                Value::Null
            } else {
                to_json(v)
            },
        );
    }
    model_info.insert("general.parameter_count".into(), json!(params));
    let template = f
        .get("tokenizer.chat_template")
        .and_then(G::as_str)
        .unwrap_or("")
        .to_string();
    let mut capabilities = vec!["completion"];
    if template.contains("tools") {
        capabilities.push("tools");
    }
    if template.contains("<think>") || template.contains("enable_thinking") {
        capabilities.push("thinking");
    }
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Details {
        details: json!({
            "parent_model": "",
            "format": "gguf",
            "family": arch,
            "families": [arch],
            "parameter_size": human(params),
            "quantization_level": quantization(&f),
        }),
        model_info,
        template,
        capabilities,
        digest: digest(path),
        modified_at: meta
            .modified()
            .map(super::clock::rfc3339)
            .unwrap_or_default(),
        size: meta.len(),
    })
}

fn to_json(v: &G) -> Value {
    match v {
        G::String(s) => json!(s),
        G::Bool(b) => json!(b),
        G::F32(x) => json!(x),
        G::F64(x) => json!(x),
        G::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        other => other
            .as_i64()
            .map(Value::from)
            .or_else(|| other.as_u64().map(Value::from))
            .unwrap_or(Value::Null),
    }
}

/// `134.52M`, `1.5B`: Ollama's parameter sizes (two decimals at most, zeros trimmed).
pub fn human(n: u64) -> String {
    let (x, unit) = match n {
        n if n >= 1_000_000_000_000 => (n as f64 / 1e12, "T"),
        n if n >= 1_000_000_000 => (n as f64 / 1e9, "B"),
        n if n >= 1_000_000 => (n as f64 / 1e6, "M"),
        n if n >= 1_000 => (n as f64 / 1e3, "K"),
        n => return n.to_string(),
    };
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{unit}")
}

/// llama.cpp's name for `general.file_type`, else the most common tensor type.
fn quantization(f: &GgufFile) -> String {
    const FTYPES: &[(u64, &str)] = &[
        (0, "F32"),
        (1, "F16"),
        (2, "Q4_0"),
        (3, "Q4_1"),
        (7, "Q8_0"),
        (8, "Q5_0"),
        (9, "Q5_1"),
        (10, "Q2_K"),
        (11, "Q3_K_S"),
        (12, "Q3_K_M"),
        (13, "Q3_K_L"),
        (14, "Q4_K_S"),
        (15, "Q4_K_M"),
        (16, "Q5_K_S"),
        (17, "Q5_K_M"),
        (18, "Q6_K"),
        (19, "IQ2_XXS"),
        (20, "IQ2_XS"),
        (21, "Q2_K_S"),
        (22, "IQ3_XS"),
        (23, "IQ3_XXS"),
        (24, "IQ1_S"),
        (25, "IQ4_NL"),
        (26, "IQ3_S"),
        (27, "IQ3_M"),
        (28, "IQ2_S"),
        (29, "IQ2_M"),
        (30, "IQ4_XS"),
        (31, "IQ1_M"),
        (32, "BF16"),
    ];
    if let Some(t) = f.get("general.file_type").and_then(G::as_u64) {
        if let Some((_, name)) = FTYPES.iter().find(|(id, _)| *id == t) {
            return name.to_string();
        }
    }
    let mut counts: Vec<(&'static str, usize)> = Vec::new();
    for t in f.tensors() {
        let name = t.ggml_type.name().unwrap_or("unknown");
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some(c) => c.1 += 1,
            None => counts.push((name, 1)),
        }
    }
    counts
        .into_iter()
        .max_by_key(|c| c.1)
        .map_or_else(String::new, |c| c.0.to_string())
}

/// The file's SHA-256 when folio knows it without reading the file: the one `folio_fetch`
/// verified (its `.sha256-ok` marker), or the catalogue's for a catalogue file name.
fn digest(path: &Path) -> String {
    let mut marker = path.as_os_str().to_owned();
    marker.push(".sha256-ok");
    let known = std::fs::read_to_string(&marker)
        .ok()
        .map(|s| s.trim().to_string())
        .or_else(|| {
            let name = path.file_name()?.to_str()?;
            folio_fetch::catalog::CATALOG
                .iter()
                .find(|e| e.file_name == name)
                .map(|e| e.sha256.to_string())
        });
    match known {
        Some(h) if h.len() == 64 => format!("sha256:{h}"),
        _ => String::new(),
    }
}

/// A model that cannot be described: 500 naming the file (a file that was on disk when
/// the server started and is not readable now).
pub fn unreadable(e: String) -> crate::error::ApiError {
    crate::error::Error::Internal(format!("model file unreadable: {e}")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_sizes_read_as_ollama_writes_them() {
        assert_eq!(human(134_515_008), "134.52M");
        assert_eq!(human(1_500_000_000), "1.5B");
        assert_eq!(human(7_000_000_000), "7B");
        assert_eq!(human(268_098_176), "268.1M");
        assert_eq!(human(999), "999");
    }
}
