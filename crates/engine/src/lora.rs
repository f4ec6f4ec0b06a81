//! The LoRA adapters a server knows, by name, and which of them are resident.
//!
//! Adapter slots are sized apart from KV memory (DESIGN.md §batching): `max_loras` adapters are
//! held in memory at once. An adapter is *registered* by name and path (`--lora`, or
//! `POST /v1/load_lora_adapter`) and *resident* while loaded. A request takes an `Arc` of
//! its adapters when it is submitted and holds it to its end, so nothing it reads can go
//! away: loading past `max_loras` evicts the least recently used *idle* resident adapter
//! (no request holds it; it is reloaded from its path on next use), and unloading an
//! adapter running requests use takes its name away at once while its memory, and its
//! slot, stay until the last of them finishes.

use folio_model::{LoraAdapter, ModelConfig, ModelError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

/// Why an adapter operation failed; messages name the adapter, the limit and the value.
#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    #[error("LoRA adapter '{0}' is not loaded")]
    Unknown(String),
    #[error("LoRA adapter '{0}' is already loaded (unload it first)")]
    Exists(String),
    #[error("lora_name: {0:?} is not a valid adapter name (1-128 characters, no whitespace, not the base model's name)")]
    BadName(String),
    #[error("all {max} adapter slots (--max-loras) hold adapters that requests are using; retry when one finishes")]
    Busy { max: usize },
    #[error("LoRA adapter '{name}' ({path}): {source}")]
    Load {
        name: String,
        path: String,
        source: Box<ModelError>,
    },
}

impl LoraError {
    /// Whether retrying later can succeed (a client error otherwise).
    pub fn is_busy(&self) -> bool {
        matches!(self, LoraError::Busy { .. })
    }

    /// Whether the file read is no adapter at all (unreadable, not a regular file, not
    /// GGUF, or a GGUF of another `general.type` / `adapter.type`), as opposed to an adapter
    /// that does not fit the model. The server answers the former with one generic message:
    /// detail about a file a client named must not tell it what other files hold.
    pub fn is_not_an_adapter(&self) -> bool {
        match self {
            LoraError::Load { source, .. } => match source.as_ref() {
                ModelError::Gguf(_) => true,
                ModelError::Metadata { key, .. } => key == "general.type" || key == "adapter.type",
                _ => false,
            },
            _ => false,
        }
    }
}

/// One registered adapter.
struct Entry {
    /// llama-server's adapter index (`lora: [{"id": …}]`): registration order, never reused.
    index: usize,
    path: PathBuf,
    /// `None` while evicted (reloaded from `path` on next use).
    adapter: Option<Arc<LoraAdapter>>,
    last_used: u64,
    requests: u64,
}

/// Reads adapter files for one base model.
pub struct LoraReader {
    config: ModelConfig,
    max_rank: usize,
}

impl LoraReader {
    /// Reads and checks an adapter file for the base model. Its content hash identifies it
    /// to the prefix cache (the same file under two names shares cached blocks).
    pub fn read(&self, name: &str, path: &Path) -> Result<LoraAdapter, LoraError> {
        let err = |source| LoraError::Load {
            name: name.into(),
            path: path.display().to_string(),
            source: Box::new(source),
        };
        let f = folio_gguf::GgufFile::open(path).map_err(|e| err(e.into()))?;
        let id = folio_core::kv::fnv1a(f.bytes());
        let mut a = LoraAdapter::from_gguf(&f, &self.config, self.max_rank, id).map_err(err)?;
        a.name = name.into();
        Ok(a)
    }
}

/// What `/v1/models`, `/lora-adapters` and `/metrics` show of one adapter.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraInfo {
    pub name: String,
    pub index: usize,
    pub path: String,
    pub resident: bool,
    pub rank: usize,
    /// Requests that used it since it was registered.
    pub requests: u64,
    /// Requests holding it now.
    pub in_use: usize,
}

/// The registry. The engine handle owns it behind a mutex; every method is short except
/// the file reads of `load` and of a reload in `resolve`.
pub struct LoraRegistry {
    config: ModelConfig,
    base_name: String,
    max_loras: usize,
    max_rank: usize,
    entries: BTreeMap<String, Entry>,
    /// Unloaded adapters that requests still hold: they keep a slot until dropped.
    draining: Vec<Weak<LoraAdapter>>,
    next_index: usize,
    clock: u64,
}

impl LoraRegistry {
    pub fn new(config: ModelConfig, base_name: &str, max_loras: usize, max_rank: usize) -> Self {
        LoraRegistry {
            config,
            base_name: base_name.into(),
            max_loras: max_loras.max(1),
            max_rank,
            entries: BTreeMap::new(),
            draining: Vec::new(),
            next_index: 0,
            clock: 0,
        }
    }

    pub fn max_loras(&self) -> usize {
        self.max_loras
    }

    pub fn max_rank(&self) -> usize {
        self.max_rank
    }

    /// Whether any adapter is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What reads adapter files for this base model, to use without holding the lock.
    pub fn reader(&self) -> LoraReader {
        LoraReader {
            config: self.config.clone(),
            max_rank: self.max_rank,
        }
    }

    /// Reads and checks an adapter file ([`LoraReader::read`]).
    pub fn read(&self, name: &str, path: &Path) -> Result<LoraAdapter, LoraError> {
        self.reader().read(name, path)
    }

    /// Registers `adapter` (from [`LoraRegistry::read`]) as `name`, resident; evicts the
    /// least recently used idle adapter when every slot is taken.
    pub fn insert(
        &mut self,
        name: &str,
        path: &Path,
        adapter: LoraAdapter,
    ) -> Result<(), LoraError> {
        if name.is_empty()
            || name.len() > 128
            || name.chars().any(char::is_whitespace)
            || name == self.base_name
        {
            return Err(LoraError::BadName(name.into()));
        }
        if self.entries.contains_key(name) {
            return Err(LoraError::Exists(name.into()));
        }
        self.make_room()?;
        self.clock += 1;
        self.entries.insert(
            name.into(),
            Entry {
                index: self.next_index,
                path: path.to_path_buf(),
                adapter: Some(Arc::new(adapter)),
                last_used: self.clock,
                requests: 0,
            },
        );
        self.next_index += 1;
        Ok(())
    }

    /// [`LoraRegistry::read`] then [`LoraRegistry::insert`].
    pub fn load(&mut self, name: &str, path: &Path) -> Result<(), LoraError> {
        if self.entries.contains_key(name) {
            return Err(LoraError::Exists(name.into()));
        }
        let a = self.read(name, path)?;
        self.insert(name, path, a)
    }

    /// Removes `name`. Requests that hold it finish with it; its slot frees when the last
    /// one does. Returns how many requests hold it now.
    pub fn unload(&mut self, name: &str) -> Result<usize, LoraError> {
        let e = self
            .entries
            .remove(name)
            .ok_or_else(|| LoraError::Unknown(name.into()))?;
        let Some(a) = e.adapter else { return Ok(0) };
        let in_use = Arc::strong_count(&a) - 1;
        if in_use > 0 {
            self.draining.push(Arc::downgrade(&a));
        }
        Ok(in_use)
    }

    /// The adapter registered as `name`, reloaded if it was evicted; counts a request.
    pub fn resolve(&mut self, name: &str) -> Result<Arc<LoraAdapter>, LoraError> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| LoraError::Unknown(name.into()))?;
        let adapter = match &e.adapter {
            Some(a) => a.clone(),
            None => {
                let path = e.path.clone();
                let a = Arc::new(self.read(name, &path)?);
                self.make_room()?;
                self.entries.get_mut(name).expect("checked").adapter = Some(a.clone());
                a
            }
        };
        self.clock += 1;
        let e = self.entries.get_mut(name).expect("checked");
        e.last_used = self.clock;
        e.requests += 1;
        Ok(adapter)
    }

    /// The name registered at llama-server index `index`.
    pub fn name_at(&self, index: usize) -> Option<&str> {
        self.entries
            .iter()
            .find(|(_, e)| e.index == index)
            .map(|(n, _)| n.as_str())
    }

    /// Slots taken: resident adapters plus unloaded ones still in use.
    pub fn slots_used(&mut self) -> usize {
        self.draining.retain(|w| w.strong_count() > 0);
        self.draining.len()
            + self
                .entries
                .values()
                .filter(|e| e.adapter.is_some())
                .count()
    }

    /// Frees a slot if none is free: evicts the least recently used idle resident adapter.
    fn make_room(&mut self) -> Result<(), LoraError> {
        if self.slots_used() < self.max_loras {
            return Ok(());
        }
        let victim = self
            .entries
            .values_mut()
            .filter(|e| {
                e.adapter
                    .as_ref()
                    .is_some_and(|a| Arc::strong_count(a) == 1)
            })
            .min_by_key(|e| e.last_used)
            .ok_or(LoraError::Busy {
                max: self.max_loras,
            })?;
        victim.adapter = None;
        Ok(())
    }

    /// Every registered adapter, by name.
    pub fn list(&self) -> Vec<LoraInfo> {
        self.entries
            .iter()
            .map(|(name, e)| LoraInfo {
                name: name.clone(),
                index: e.index,
                path: e.path.display().to_string(),
                resident: e.adapter.is_some(),
                rank: e.adapter.as_ref().map_or(0, |a| a.rank),
                requests: e.requests,
                in_use: e.adapter.as_ref().map_or(0, |a| Arc::strong_count(a) - 1),
            })
            .collect()
    }
}
