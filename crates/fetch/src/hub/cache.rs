//! The `huggingface_hub` cache layout, shared with `hf download` and the Python library:
//! `$HF_HOME/hub/models--ORG--REPO/{blobs/<etag>, snapshots/<commit>/<FILE> -> blob,
//! refs/main}`.

use crate::error::Context;
use crate::Result;
use std::path::{Path, PathBuf};

/// `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.
pub fn hub_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("HF_HUB_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(h) = std::env::var_os("HF_HOME") {
        return PathBuf::from(h).join("hub");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("huggingface").join("hub")
}

/// `models--ORG--REPO` under [`hub_dir`].
pub fn repo_dir(repo: &str) -> PathBuf {
    hub_dir().join(format!("models--{}", repo.replace('/', "--")))
}

/// The commit `refs/main` holds.
pub fn main_commit(repo_dir: &Path) -> Option<String> {
    let c = std::fs::read_to_string(repo_dir.join("refs").join("main")).ok()?;
    let c = c.trim();
    (!c.is_empty()).then(|| c.to_string())
}

/// The files of the snapshot `commit` that exist (links resolving to a file), relative to
/// the snapshot, `/`-separated.
pub fn snapshot_files(repo_dir: &Path, commit: &str) -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let p = e.path();
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => walk(&p, &r, out),
                Ok(m) if m.is_file() => out.push(r),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo_dir.join("snapshots").join(commit), "", &mut out);
    out.sort();
    out
}

/// `snapshots/<commit>/<file>`.
pub fn snapshot_path(repo_dir: &Path, commit: &str, file: &str) -> PathBuf {
    let mut p = repo_dir.join("snapshots").join(commit);
    for c in file.split('/') {
        p.push(c);
    }
    p
}

/// `blobs/<etag>`.
pub fn blob_path(repo_dir: &Path, etag: &str) -> PathBuf {
    repo_dir.join("blobs").join(etag)
}

/// Links `snapshots/<commit>/<file>` to `blobs/<etag>` (relative, as `huggingface_hub`
/// does) and writes `refs/main`.
pub fn link(repo_dir: &Path, commit: &str, file: &str, etag: &str) -> Result<PathBuf> {
    let snap = snapshot_path(repo_dir, commit, file);
    let parent = snap.parent().expect("a snapshot path has a parent");
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let depth = file.split('/').count() + 1; // snapshots/<commit>/[dirs/]file
    let mut target = PathBuf::new();
    for _ in 0..depth {
        target.push("..");
    }
    target.push("blobs");
    target.push(etag);
    let _ = std::fs::remove_file(&snap);
    #[cfg(unix)]
    std::os::unix::fs::symlink(&target, &snap)
        .with_context(|| format!("linking {} to {}", snap.display(), target.display()))?;
    #[cfg(not(unix))]
    std::fs::copy(blob_path(repo_dir, etag), &snap)
        .with_context(|| format!("copying the blob to {}", snap.display()))?;
    set_main(repo_dir, commit)?;
    Ok(snap)
}

/// Writes `refs/main`.
pub fn set_main(repo_dir: &Path, commit: &str) -> Result<()> {
    let refs = repo_dir.join("refs");
    std::fs::create_dir_all(&refs).with_context(|| format!("creating {}", refs.display()))?;
    std::fs::write(refs.join("main"), commit)
        .with_context(|| format!("writing {}", refs.join("main").display()))
}
