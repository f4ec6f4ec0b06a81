//! `folio rm NAME`: deletes a cached model file and its verification marker.

use anyhow::Result;

pub fn run(name: &str) -> Result<()> {
    let gone = folio_fetch::remove(name)?;
    println!("deleted '{}' ({})", gone.name, gone.path.display());
    Ok(())
}
