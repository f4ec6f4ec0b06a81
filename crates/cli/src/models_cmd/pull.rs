//! `folio pull NAME`: fetches a catalogue model into the cache (pip's and the assembly's
//! progress bars on stderr), or checks the file already there.

use anyhow::Result;

pub fn run(name: &str) -> Result<()> {
    let path = folio_fetch::pull(name)?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "success: {name} at {} ({})",
        path.display(),
        folio_fetch::human_size(size)
    );
    Ok(())
}
