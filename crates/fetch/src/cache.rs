//! The model cache as `folio pull/list/rm` see it: the GGUF files under
//! `$FOLIO_HOME/models`, each named by its catalogue name when it is a catalogue model's
//! file, else by its file name without `.gguf` (the name a server gives a file by default).

use crate::catalog::{self, Entry};
use crate::error::{bail, Context};
use crate::{ensure, marker_path, models_dir, Result};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// One model file in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    /// The catalogue name, or the file name without `.gguf`.
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
    pub modified: SystemTime,
    /// The catalogue entry whose file this is.
    pub entry: Option<&'static Entry>,
}

/// The name `list` shows for a cached file called `file_name`.
fn name_of(file_name: &str) -> (String, Option<&'static Entry>) {
    match catalog::CATALOG.iter().find(|e| e.file_name == file_name) {
        Some(e) => (e.name.to_string(), Some(e)),
        None => (
            file_name
                .strip_suffix(".gguf")
                .unwrap_or(file_name)
                .to_string(),
            None,
        ),
    }
}

/// The cached models in `dir`, by name. Hidden files (downloads in progress, `.part`
/// files) and anything but `*.gguf` files are left out; a missing directory is an empty
/// cache.
pub fn cached_in(dir: &Path) -> Result<Vec<Cached>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if file_name.starts_with('.') || !file_name.ends_with(".gguf") {
            continue;
        }
        let path = entry.path();
        // Follows symlinks: a linked model is listed with its target's size.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let (name, entry) = name_of(&file_name);
        out.push(Cached {
            name,
            path,
            size: meta.len(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            entry,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The cached models under `$FOLIO_HOME/models`.
pub fn cached() -> Result<Vec<Cached>> {
    cached_in(&models_dir())
}

/// Deletes the cached model `name` (a name `list` shows, or its file name) and its
/// verification marker; the file deleted. A name not in the cache is an error naming the
/// cache directory and what it holds.
pub fn remove(name: &str) -> Result<Cached> {
    let dir = models_dir();
    let all = cached_in(&dir)?;
    let Some(found) = all.iter().find(|c| {
        c.name == name
            || c.path
                .file_name()
                .is_some_and(|f| f.to_string_lossy() == name)
    }) else {
        let have = if all.is_empty() {
            "it is empty".to_string()
        } else {
            let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
            format!("it holds: {}", names.join(", "))
        };
        bail!(
            "model {name:?} is not in the cache {} ({have}; `folio list` shows it)",
            dir.display()
        );
    };
    std::fs::remove_file(&found.path)
        .with_context(|| format!("deleting {}", found.path.display()))?;
    match std::fs::remove_file(marker_path(&found.path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e)
                .with_context(|| format!("deleting {}", marker_path(&found.path).display()))
        }
        _ => {}
    }
    Ok(found.clone())
}

/// Fetches the catalogue model `name` (as [`catalog::find_loose`] reads it), or the Hub
/// model `hf:ORG/REPO[:QUANT]` (into the Hugging Face cache, every part of a split GGUF),
/// checking a file already there; the path (a split GGUF's first part).
pub fn pull(name: &str) -> Result<PathBuf> {
    if crate::hub::is_hub_name(name) {
        let mut files = crate::hub::fetch(name)?;
        return Ok(files.remove(0));
    }
    match catalog::find_loose(name) {
        Some(e) => ensure(e),
        None => bail!(
            "{name:?} is not a catalogue model; the catalogue has: {} (`folio models` lists them)",
            catalog::names()
        ),
    }
}
