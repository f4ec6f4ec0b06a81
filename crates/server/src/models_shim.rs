//! A single-model stand-in for the per-model registry (`models`, see REGISTRY_API): the
//! same signatures over today's one engine, so the Ollama endpoints are written against
//! the registry and the lead swaps this file for the real one at merge.

#![allow(dead_code)]

use crate::error::ApiError;
use crate::state::AppState;
use folio_engine::EngineHandle;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// One loaded model.
pub struct Served {
    pub engine: EngineHandle,
    pub name: String,
}

/// A model held for one request (here: the one engine, never unloaded).
pub struct Lease {
    served: Served,
}

impl std::ops::Deref for Lease {
    type Target = Served;
    fn deref(&self) -> &Served {
        &self.served
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelStatus {
    Unloaded,
    Loading,
    Loaded,
}

#[derive(Clone, Debug)]
pub struct ModelEntry {
    pub name: String,
    pub path: Option<PathBuf>,
    pub size_bytes: u64,
    pub status: ModelStatus,
    pub expires_at: Option<SystemTime>,
    pub memory_bytes: u64,
    pub context_length: Option<usize>,
}

impl AppState {
    /// The one model; any other name is a 404 naming it.
    pub async fn lease(&self, model: Option<&str>) -> Result<Lease, ApiError> {
        let s = &self.0;
        match model {
            Some(m) if m != s.model_name => Err(ApiError::model_not_found(m, &s.model_name)),
            _ => Ok(Lease {
                served: Served {
                    engine: s.engine.clone(),
                    name: s.model_name.clone(),
                },
            }),
        }
    }

    pub fn model_list(&self) -> Vec<ModelEntry> {
        let s = &self.0;
        let info = &s.engine.info;
        let path = PathBuf::from(&info.model_path);
        let size_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        let kv = (info.num_blocks * info.kv_block_bytes) as u64;
        vec![ModelEntry {
            name: s.model_name.clone(),
            path: Some(path),
            size_bytes,
            status: ModelStatus::Loaded,
            expires_at: None,
            memory_bytes: size_bytes + kv,
            context_length: Some(info.context_length),
        }]
    }

    pub async fn load_model(&self, name: &str) -> Result<(), ApiError> {
        self.lease(Some(name)).await.map(drop)
    }

    pub fn unload_model(&self, name: &str) -> Result<(), ApiError> {
        let s = &self.0;
        if name != s.model_name {
            return Err(ApiError::model_not_found(name, &s.model_name));
        }
        Err(ApiError::bad_request(
            format!("model {name:?} is the only model this server serves; it is not unloaded"),
            "invalid_request",
        ))
    }

    /// One model that is never unloaded: nothing to time.
    pub fn keep_alive(&self, _name: &str, _d: Duration) {}
}
