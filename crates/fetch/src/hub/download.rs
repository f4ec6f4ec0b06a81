//! One file of a repository into the cache: `blobs/<etag>` written through
//! `blobs/<etag>.incomplete` (resumed with an HTTP `Range` after a cut connection, in this
//! run or a later one), then linked from `snapshots/<commit>/<FILE>`.

use super::api::{self, Client, Failure};
use super::cache;
use crate::error::{bail, Context};
use crate::Result;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Attempts at one file (each after the first resumes where the last stopped).
const ATTEMPTS: usize = 5;

/// `file` of `repo` in the cache under `repo_dir`, downloaded if its blob is not there;
/// the snapshot path.
pub fn download(client: &Client, repo: &str, repo_dir: &Path, file: &str) -> Result<PathBuf> {
    let what = format!("HEAD {file}");
    let meta = client
        .head(repo, file)
        .map_err(|f| api::error(repo, client.base(), &what, f))?;
    let blob = cache::blob_path(repo_dir, &meta.etag);
    let complete = std::fs::metadata(&blob)
        .is_ok_and(|m| m.is_file() && meta.size.is_none_or(|s| s == m.len()));
    if !complete {
        let blobs = repo_dir.join("blobs");
        std::fs::create_dir_all(&blobs).with_context(|| format!("creating {}", blobs.display()))?;
        let incomplete = blobs.join(format!("{}.incomplete", meta.etag));
        fetch_blob(client, repo, file, meta.size, &incomplete)?;
        std::fs::rename(&incomplete, &blob)
            .with_context(|| format!("renaming {} to {}", incomplete.display(), blob.display()))?;
    }
    cache::link(repo_dir, &meta.commit, file, &meta.etag)
}

fn fetch_blob(
    client: &Client,
    repo: &str,
    file: &str,
    size: Option<u64>,
    incomplete: &Path,
) -> Result<()> {
    let bar = ProgressBar::new(size.unwrap_or(0));
    bar.set_style(
        ProgressStyle::with_template(
            "downloading {msg} {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .expect("static template is valid"),
    );
    bar.set_message(file.to_string());
    let mut last_error = String::new();
    for attempt in 0..ATTEMPTS {
        let have = std::fs::metadata(incomplete).map(|m| m.len()).unwrap_or(0);
        if size.is_some_and(|s| have == s) {
            bar.finish_and_clear();
            return Ok(());
        }
        if attempt > 0 || have > 0 {
            eprintln!("folio: resuming {file} of hf:{repo} at byte {have}");
        }
        let (resp, partial) = match client.get(repo, file, have) {
            Ok(r) => r,
            Err(Failure::Status(416, _)) => {
                // The partial file does not fit the file now there: start over.
                let _ = std::fs::remove_file(incomplete);
                last_error = "416 for the range".to_string();
                continue;
            }
            Err(Failure::Unreachable(e)) if attempt + 1 < ATTEMPTS => {
                last_error = e;
                std::thread::sleep(std::time::Duration::from_millis(200 << attempt));
                continue;
            }
            Err(f) => {
                bar.finish_and_clear();
                return Err(api::error(repo, client.base(), &format!("GET {file}"), f));
            }
        };
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(partial)
            .truncate(!partial)
            .open(incomplete)
            .with_context(|| format!("opening {}", incomplete.display()))?;
        let mut written = if partial { have } else { 0 };
        bar.set_position(written);
        let mut body = resp.into_reader();
        let mut buf = vec![0u8; 1 << 20];
        let cut = loop {
            match body.read(&mut buf) {
                Ok(0) => break None,
                Ok(n) => {
                    out.write_all(&buf[..n])
                        .with_context(|| format!("writing {}", incomplete.display()))?;
                    written += n as u64;
                    bar.set_position(written);
                }
                Err(e) => break Some(e.to_string()),
            }
        };
        out.sync_all()?;
        match (cut, size) {
            (None, Some(s)) if written == s => {
                bar.finish_and_clear();
                return Ok(());
            }
            (None, None) => {
                bar.finish_and_clear();
                return Ok(());
            }
            (None, Some(s)) if written > s => {
                let _ = std::fs::remove_file(incomplete);
                bar.finish_and_clear();
                bail!("hf:{repo}: {file} came with {written} bytes, more than the {s} announced");
            }
            (Some(e), _) => last_error = format!("connection cut at byte {written}: {e}"),
            (None, _) => last_error = format!("connection closed at byte {written}"),
        }
    }
    bar.finish_and_clear();
    bail!(
        "hf:{repo}: downloading {file} failed after {ATTEMPTS} attempts ({last_error}); the part downloaded is kept in {} and the next run resumes it",
        incomplete.display()
    )
}
