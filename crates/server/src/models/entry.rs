//! What `/v1/models`, `/models`, Ollama's `/api/tags` and `/api/ps` say about one known
//! model, and what the server needs to load it.

use std::path::PathBuf;
use std::time::SystemTime;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelStatus {
    Unloaded,
    Loading,
    Loaded,
}

impl ModelStatus {
    /// llama-server router mode's spelling (`"status": {"value": …}`).
    pub fn as_str(self) -> &'static str {
        match self {
            ModelStatus::Unloaded => "unloaded",
            ModelStatus::Loading => "loading",
            ModelStatus::Loaded => "loaded",
        }
    }
}

/// One known model, as listed.
#[derive(Clone, Debug)]
pub struct ModelEntry {
    /// The name clients put in `model`.
    pub name: String,
    /// The GGUF file (`None` while only a catalogue name not yet fetched).
    pub path: Option<PathBuf>,
    /// The file's size (0 if not on disk).
    pub size_bytes: u64,
    pub status: ModelStatus,
    /// When an idle loaded model will be unloaded (`None`: not loaded, serving a request,
    /// or kept for ever).
    pub expires_at: Option<SystemTime>,
    /// Weights + KV pool when loaded (0 otherwise).
    pub memory_bytes: u64,
    /// The context length, when loaded.
    pub context_length: Option<usize>,
}

/// A model the server can load: its name, where it is, and what loading it will take.
#[derive(Clone, Debug)]
pub struct ModelSource {
    pub name: String,
    /// The GGUF file; `None`: the loader resolves `name` (a catalogue model fetched on
    /// first use).
    pub path: Option<PathBuf>,
    /// The file's size (0 if not on disk yet).
    pub size_bytes: u64,
    /// The KV pool the engine config will allocate (counted before loading, against
    /// `--models-memory`).
    pub kv_bytes: u64,
}

impl ModelSource {
    /// A GGUF file on disk, its size read from the file system.
    pub fn file(name: impl Into<String>, path: PathBuf, kv_bytes: u64) -> ModelSource {
        let size_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        ModelSource {
            name: name.into(),
            path: Some(path),
            size_bytes,
            kv_bytes,
        }
    }

    /// The memory loading it will take, counted before it is loaded.
    pub fn estimate(&self) -> u64 {
        self.size_bytes + self.kv_bytes
    }
}
