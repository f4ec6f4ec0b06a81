//! Which files a client may have the server open as a LoRA adapter
//! (`POST /v1/load_lora_adapter`).
//!
//! The path comes from the network, so loading is off unless the operator turned it on
//! (`--allow-runtime-lora`, or vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING`), paths stay inside
//! `--lora-dir` when one is given, and a refusal says nothing about files the client could
//! not otherwise see: a path that is missing, unreadable, not a regular file or not an
//! adapter gets the same answer, without any of its bytes.

use crate::error::ApiError;
use std::path::{Component, Path, PathBuf};

/// The one answer for every file that cannot be an adapter, whatever the reason.
pub const NOT_LOADABLE: &str = "not a loadable LoRA adapter (a regular, readable llama.cpp LoRA GGUF file with general.type = adapter)";

/// 403 while runtime loading is off, naming how to turn it on.
pub fn disabled() -> ApiError {
    crate::error::Error::RuntimeLoraDisabled.into()
}

/// 400 on `lora_path` with `message`.
pub fn refused(message: impl Into<String>) -> ApiError {
    crate::error::Error::LoraPath(message.into()).into()
}

/// `..` and `.` resolved without touching the file system, so a path is judged against the
/// directory before anything about it is looked up.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The file to open for `raw` under `lora_dir`: inside the directory both as written and
/// after symlinks are followed, and a regular file. Errors are [`refused`] ones: outside the
/// directory (judged before the file is looked at, so it tells nothing of files there), or
/// [`NOT_LOADABLE`].
pub fn resolve(raw: &str, lora_dir: Option<&Path>) -> Result<PathBuf, ApiError> {
    let outside = || {
        refused(
            "must name a file inside the server's --lora-dir (relative paths are taken inside it)",
        )
    };
    let path = match lora_dir {
        None => PathBuf::from(raw),
        Some(dir) => {
            let dir_abs = std::path::absolute(dir).map_err(|_| outside())?;
            let dir_abs = lexical(&dir_abs);
            let p = lexical(&dir_abs.join(raw));
            if !p.starts_with(&dir_abs) || p == dir_abs {
                return Err(outside());
            }
            // A symlink inside the directory may point out of it: judged again after
            // following links (the directory is the operator's, so saying so leaks nothing).
            let dir_real = dir.canonicalize().map_err(|_| outside())?;
            let real = p.canonicalize().map_err(|_| refused(NOT_LOADABLE))?;
            if !real.starts_with(&dir_real) {
                return Err(outside());
            }
            real
        }
    };
    // Only regular files: a FIFO or device would block or never end. The reader checks
    // again on the descriptor it opens (non-blocking), in case the path changes meanwhile.
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(path),
        _ => Err(refused(NOT_LOADABLE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_outside_the_directory_are_refused_before_being_looked_at() {
        let root = std::env::temp_dir().join(format!("folio-lora-path-{}", std::process::id()));
        let dir = root.join("adapters");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.gguf"), b"x").unwrap();
        std::fs::write(root.join("secret"), b"x").unwrap();
        let msg = |r: Result<PathBuf, ApiError>| r.unwrap_err().message;
        assert_eq!(
            resolve("a.gguf", Some(&dir)).unwrap(),
            dir.join("a.gguf").canonicalize().unwrap()
        );
        let abs = dir.join("a.gguf");
        assert!(resolve(abs.to_str().unwrap(), Some(&dir)).is_ok());
        for bad in [
            "../secret",
            "/etc/passwd",
            "../missing",
            "/nonexistent/x",
            ".",
            "",
        ] {
            assert!(
                msg(resolve(bad, Some(&dir))).contains("--lora-dir"),
                "{bad}"
            );
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(root.join("secret"), dir.join("link")).unwrap();
            assert!(msg(resolve("link", Some(&dir))).contains("--lora-dir"));
        }
        // Missing and non-regular files inside get the same answer as each other.
        let not_loadable = format!("lora_path: {NOT_LOADABLE}");
        assert_eq!(msg(resolve("missing.gguf", Some(&dir))), not_loadable);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        assert_eq!(msg(resolve("sub", Some(&dir))), not_loadable);
        assert_eq!(msg(resolve("/nonexistent/x", None)), not_loadable);
        let _ = std::fs::remove_dir_all(&root);
    }
}
