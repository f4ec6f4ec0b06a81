//! Models named `hf:ORG/REPO[:QUANT]`, fetched from the Hugging Face Hub (or
//! `$HF_ENDPOINT`) into the `huggingface_hub` cache (`$HF_HOME/hub`), so that files
//! `hf download` or the Python library fetched are used as they are, and the reverse.
//!
//! A name resolves without a request when the cache's `refs/main` snapshot holds the quant
//! asked for (default [`select::DEFAULT_QUANT`]); else the repository's files are listed and
//! the quant picked (exact, else the closest in [`select::PREFERENCE`]). With
//! `HF_HUB_OFFLINE=1`, or when the endpoint cannot be reached, the closest cached file is
//! used, and its absence is an error.

pub mod api;
pub mod cache;
pub mod download;
pub mod select;

use crate::error::bail;
use crate::Result;
use select::Candidate;
use std::path::PathBuf;

/// `hf:ORG/REPO[:QUANT]` taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubName {
    pub repo: String,
    pub quant: Option<String>,
}

/// Whether `name` is a Hub name (`hf:…`).
pub fn is_hub_name(name: &str) -> bool {
    name.starts_with("hf:")
}

/// `hf:ORG/REPO[:QUANT]`.
pub fn parse(name: &str) -> Result<HubName> {
    let Some(rest) = name.strip_prefix("hf:") else {
        bail!("{name:?} is not a Hugging Face Hub name (hf:ORG/REPO[:QUANT])");
    };
    let (repo, quant) = match rest.split_once(':') {
        Some((r, q)) => (r, Some(q.to_string()).filter(|q| !q.is_empty())),
        None => (rest, None),
    };
    let ok = repo.split('/').count() == 2
        && repo.split('/').all(|p| {
            !p.is_empty()
                && p != "."
                && p != ".."
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        });
    if !ok {
        bail!("{name:?}: a Hugging Face Hub name is hf:ORG/REPO or hf:ORG/REPO:QUANT (e.g. hf:ggml-org/gemma-3-1b-it-GGUF:Q4_K_M)");
    }
    Ok(HubName {
        repo: repo.to_string(),
        quant,
    })
}

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .map(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        })
        .unwrap_or(false)
}

/// The GGUF files `name` selects, in the cache, downloaded if needed (every part of a
/// split GGUF).
pub fn fetch(name: &str) -> Result<Vec<PathBuf>> {
    resolve(name, true)
}

/// The one GGUF file `name` selects, downloaded if needed. A split GGUF is refused before
/// any download: folio's loader reads one file.
pub fn model_file(name: &str) -> Result<PathBuf> {
    let mut files = resolve(name, false)?;
    Ok(files.remove(0))
}

fn refuse_split(name: &str, c: &Candidate) -> Result<()> {
    bail!(
        "{name}: the selected model is a split GGUF in {} parts ({}), and folio loads a single GGUF file; merge them (`llama-gguf-split --merge {} merged.gguf`; `folio pull {name}` downloads the parts) or pick another quant",
        c.files.len(),
        c.files.join(", "),
        c.files[0]
    )
}

fn resolve(name: &str, allow_split: bool) -> Result<Vec<PathBuf>> {
    let hub = parse(name)?;
    let repo = &hub.repo;
    let quant = hub.quant.as_deref().unwrap_or(select::DEFAULT_QUANT);
    let dir = cache::repo_dir(repo);
    let cached_commit = cache::main_commit(&dir);
    let cached_cands = cached_commit
        .as_deref()
        .map(|c| select::candidates(&cache::snapshot_files(&dir, c)))
        .unwrap_or_default();
    let from_cache = |c: &Candidate| -> Result<Vec<PathBuf>> {
        if !allow_split && c.is_split() {
            refuse_split(name, c)?;
        }
        let commit = cached_commit
            .as_deref()
            .expect("cached candidates have a commit");
        Ok(c.files
            .iter()
            .map(|f| cache::snapshot_path(&dir, commit, f))
            .collect())
    };
    // The quant asked for, already cached: no request.
    if let Some(c) = cached_cands
        .iter()
        .find(|c| select::has_quant(&c.files[0], quant))
    {
        return from_cache(c);
    }
    let closest_cached = |why: String| -> Result<Vec<PathBuf>> {
        match select::select(&cached_cands, quant) {
            Some(c) => {
                eprintln!("folio: {why}; using the cached {}", c.files[0]);
                from_cache(c)
            }
            None => bail!(
                "{name}: {why}, and no GGUF of {repo} is in the Hugging Face cache {}",
                dir.display()
            ),
        }
    };
    if offline() {
        return closest_cached("HF_HUB_OFFLINE is set".to_string());
    }
    let client = api::Client::new();
    let files = match client.list(repo) {
        Ok(f) => f,
        Err(api::Failure::Unreachable(e)) => {
            return closest_cached(format!("{} cannot be reached ({e})", client.base()))
        }
        Err(f) => return Err(api::error(repo, client.base(), "listing its files", f)),
    };
    let cands = select::candidates(&files);
    let Some(chosen) = select::select(&cands, quant) else {
        bail!(
            "{name}: the repository has no GGUF file ({} files listed on {}); folio loads GGUF files",
            files.len(),
            client.base()
        );
    };
    if !select::has_quant(&chosen.files[0], quant) {
        eprintln!(
            "folio: {repo} has no {quant} file; using the closest, {}",
            chosen.files[0]
        );
    }
    if !allow_split && chosen.is_split() {
        refuse_split(name, chosen)?;
    }
    let mut out = Vec::with_capacity(chosen.files.len());
    for f in &chosen.files {
        out.push(download::download(&client, repo, &dir, f)?);
    }
    Ok(out)
}
