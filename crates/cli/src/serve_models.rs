//! `folio serve` with several models: `--models-dir DIR` (every `*.gguf` under it and in
//! the model cache), repeated `--model NAME=PATH|catalogue-name`, and the flags that say
//! when models load and unload (`--models-max`, `--models-memory`, `--keep-alive`,
//! `--load-timeout`). The server's `models::Registry` does the loading; this builds its
//! list and its loader.

use crate::engine_args::{self, EngineArgs};
use anyhow::{bail, Context, Result};
use folio_server::models::{Loader, ModelSource, Policy, Registry};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The flags of a server of several models.
#[derive(clap::Args, Clone, Debug)]
pub struct ModelsArgs {
    /// Serve every `*.gguf` under DIR (and in the model cache, ~/.cache/folio/models),
    /// each named by its file stem and loaded on first use.
    #[arg(long, value_name = "DIR")]
    pub models_dir: Option<PathBuf>,
    /// Most models loaded at once; loading one more unloads the least recently used idle
    /// one (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub models_max: usize,
    /// Memory for loaded models (suffixes k, m, g): each counts its GGUF file's size plus
    /// its KV pool (--kv-cache-bytes); the least recently used idle model is unloaded to
    /// make room. Default: no limit.
    #[arg(long, value_name = "BYTES")]
    pub models_memory: Option<String>,
    /// How long an idle model stays loaded: 30s, 5m, 1h; 0 unloads it when its last
    /// request ends; -1 or never keeps it.
    #[arg(long, default_value = "5m")]
    pub keep_alive: String,
    /// How long a request waits for its model to load (or for room to load it).
    #[arg(long, default_value = "10m")]
    pub load_timeout: String,
}

/// Whether the flags ask for a server of several models (else: today's single model).
pub fn wanted(engine: &EngineArgs, m: &ModelsArgs) -> bool {
    m.models_dir.is_some()
        || engine.model.len() > 1
        || engine
            .model
            .iter()
            .any(|p| p.to_string_lossy().contains('=') && !p.exists())
}

/// `5m`, `30s`, `1h`, `250ms`, a number of seconds; `-1`/`never`: `None` (for ever).
pub fn parse_duration(flag: &str, s: &str) -> Result<Option<Duration>> {
    let t = s.trim().to_ascii_lowercase();
    if t == "-1" || t == "never" || t == "inf" {
        return Ok(None);
    }
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t.as_str(), "s"),
    };
    let mul = match unit {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => bail!("{flag}: expected a duration like 30s, 5m, 1h, 0 or -1, got {s:?}"),
    };
    let v: f64 = num.parse().with_context(|| {
        format!("{flag}: expected a duration like 30s, 5m, 1h, 0 or -1, got {s:?}")
    })?;
    if !(v >= 0.0 && v * mul <= 1e9) {
        bail!("{flag}: must be 0 or more (or -1 for never), got {s:?}");
    }
    Ok(Some(Duration::from_secs_f64(v * mul)))
}

/// Every `*.gguf` under `dir` (recursively), sorted.
fn ggufs_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            ggufs_under(&p, out);
        } else if p
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            out.push(p);
        }
    }
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// The registry of the models the flags name, with a loader that builds each engine
/// with `engine`'s settings.
pub fn registry(engine: &EngineArgs, m: &ModelsArgs) -> Result<Arc<Registry>> {
    if engine.draft_model.is_some() {
        bail!("--draft-model: not available with several models (--models-dir, --model NAME=PATH)");
    }
    engine_args::apply_threads(engine.threads)?;
    let cfg = engine.config()?;
    let kv = cfg.kv_cache_bytes as u64;
    let mut sources: Vec<ModelSource> = Vec::new();
    // A catalogue name a model is fetched by on first use.
    let mut catalogue: HashMap<String, PathBuf> = HashMap::new();
    let add = |src: ModelSource, sources: &mut Vec<ModelSource>| {
        if sources.iter().any(|s| s.name == src.name) {
            tracing::warn!(model = %src.name, "a model of this name is already listed; the later one is ignored");
        } else {
            sources.push(src);
        }
    };
    for arg in &engine.model {
        let text = arg.to_string_lossy().into_owned();
        let (name, target) = match text.split_once('=') {
            Some((n, t)) if !arg.exists() && !n.is_empty() && !t.is_empty() => {
                (Some(n.to_string()), PathBuf::from(t))
            }
            _ => (None, arg.clone()),
        };
        if target.is_file() {
            let name = name.unwrap_or_else(|| stem(&target));
            add(ModelSource::file(name, target, kv), &mut sources);
        } else {
            let spec = target.to_string_lossy().into_owned();
            if folio_fetch::catalog::find_loose(&spec).is_none()
                && !folio_fetch::hub::is_hub_name(&spec)
            {
                bail!(
                    "--model {text}: {spec} is neither a file, a catalogue model ({}) nor hf:ORG/REPO[:QUANT]",
                    folio_fetch::catalog::names()
                );
            }
            let name = name.unwrap_or_else(|| spec.clone());
            catalogue.insert(name.clone(), target);
            add(
                ModelSource {
                    name,
                    path: None,
                    size_bytes: 0,
                    kv_bytes: kv,
                },
                &mut sources,
            );
        }
    }
    let default = sources.first().map(|s| s.name.clone());
    if let Some(dir) = &m.models_dir {
        if !dir.is_dir() {
            bail!(
                "--models-dir: must be an existing directory, got {}",
                dir.display()
            );
        }
        let mut files = Vec::new();
        ggufs_under(dir, &mut files);
        ggufs_under(&folio_fetch::models_dir(), &mut files);
        for f in files {
            add(ModelSource::file(stem(&f), f, kv), &mut sources);
        }
    }
    if sources.is_empty() {
        bail!(
            "--models-dir: no *.gguf file found (nor in {})",
            folio_fetch::models_dir().display()
        );
    }
    let policy = Policy {
        max_loaded: m.models_max,
        memory_bytes: match &m.models_memory {
            Some(s) => Some(engine_args::parse_bytes("--models-memory", s)? as u64),
            None => None,
        },
        keep_alive: parse_duration("--keep-alive", &m.keep_alive)?,
        load_timeout: parse_duration("--load-timeout", &m.load_timeout)?
            .unwrap_or(Duration::from_secs(1 << 30)),
    };
    let args = engine.clone();
    let loader: Loader = Arc::new(move |src: &ModelSource| {
        let path = match (&src.path, catalogue.get(&src.name)) {
            (Some(p), _) => p.clone(),
            (None, Some(spec)) => {
                engine_args::resolve_model(Some(spec)).map_err(|e| format!("{e:#}"))?
            }
            (None, None) => return Err(format!("no file for model {}", src.name)),
        };
        engine_args::start_named(&args, cfg.clone(), &path, &src.name).map_err(|e| format!("{e:#}"))
    });
    Ok(Registry::new(sources, default, loader, policy))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_durations() {
        let d = |s| parse_duration("--keep-alive", s).unwrap();
        assert_eq!(d("5m"), Some(Duration::from_secs(300)));
        assert_eq!(d("30s"), Some(Duration::from_secs(30)));
        assert_eq!(d("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(d("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        assert_eq!(d("90"), Some(Duration::from_secs(90)));
        assert_eq!(d("-1"), None);
        assert_eq!(d("never"), None);
        let e = parse_duration("--keep-alive", "5 days")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--keep-alive: expected a duration like 30s, 5m, 1h, 0 or -1, got \"5 days\""
        );
        assert!(parse_duration("--keep-alive", "-5s").is_err());
    }
}
