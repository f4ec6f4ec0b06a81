//! Per-test scratch directories that go away with the test.

use std::path::{Path, PathBuf};

/// A directory under the system temp dir, named for a prefix, a tag and the process, and
/// removed with everything in it when dropped: files a test writes (models, adapters) do
/// not outlive the test that wrote them. Removing a file a server still has mapped is
/// harmless on Unix (the mapping keeps its pages), so the guard may drop first.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates (or empties and re-creates) `$TMP/{prefix}-{tag}-{pid}`; `tag` keeps the
    /// directories of tests that run in parallel in one process apart.
    pub fn new(prefix: &str, tag: &str) -> std::io::Result<TempDir> {
        let path = std::env::temp_dir().join(format!("{prefix}-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::TempDir;

    #[test]
    fn the_directory_and_its_files_go_with_the_guard() {
        let d = TempDir::new("folio-testkit-temp", "drop").unwrap();
        let (dir, file) = (d.path().to_path_buf(), d.path().join("f.bin"));
        std::fs::write(&file, b"x").unwrap();
        assert!(file.exists());
        drop(d);
        assert!(!dir.exists(), "{} is still there", dir.display());
    }
}
