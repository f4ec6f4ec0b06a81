//! The second KV tier: evicted prefix blocks spilled to files on local disk, fetched back
//! instead of recomputed when fetching is cheaper (T_f < T_r), and kept across restarts.
//!
//! On a GPU this tier would be host memory; on a CPU-only machine host memory *is* the
//! first tier, so the second is disk. The tier keeps to its own subdirectory,
//! [`SUBDIR`] inside the directory given (`--kv-disk-dir`), and only ever deletes files
//! there that it names itself (`*.kvb`, `*.kvb.tmp`): the directory given may hold anything
//! else of the user's. One file per block:
//!
//! ```text
//! "FOLIOKV1" | salt u64 | hash u64 | has_parent u8 | parent u64 | n u32 | tokens n×u32
//!            | payload_len u64 | fnv64(payload) u64 | payload
//! ```
//! Files are written to `*.kvb.tmp`, synced, then renamed, so a crash mid-write leaves
//! either the old state or a stray `.kvb.tmp` (deleted at open), never a torn block; a
//! write that fails (a full disk) deletes its temp file at once. The checksum catches
//! anything else (a bad file is dropped, the block is recomputed). Total size is bounded:
//! the oldest blocks are deleted first. The salt (the model file's *contents*, see
//! [`crate::model_key`], + KV format + numerics) keeps another model's blocks from ever
//! matching, also a different file later put at the same path.

use folio_core::kv::fnv1a as fnv64;
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

const MAGIC: &[u8; 8] = b"FOLIOKV1";

/// The tier's own directory inside the one configured.
pub const SUBDIR: &str = "folio-kv";
/// A block file's extension; its temp file adds [`TMP_SUFFIX`].
const BLOCK_EXT: &str = "kvb";
const TMP_SUFFIX: &str = ".tmp";

struct Entry {
    parent: Option<u64>,
    tokens: Vec<u32>,
    bytes: u64,
}

/// Counters of the tier.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TierStats {
    pub blocks: usize,
    pub bytes: u64,
    pub spills: u64,
    pub fetches: u64,
    pub fetch_failures: u64,
    /// Smoothed seconds to fetch one block (T_f), first measured by a probe at open.
    pub fetch_s_per_block: f64,
    /// Smoothed seconds to spill one block (T_m), likewise.
    pub spill_s_per_block: f64,
}

/// A bounded directory of spilled KV blocks.
pub struct DiskTier {
    dir: PathBuf,
    cap_bytes: u64,
    salt: u64,
    payload_bytes: usize,
    index: HashMap<u64, Entry>,
    /// Spill order, oldest first (deletion order when over the cap).
    order: VecDeque<u64>,
    pub stats: TierStats,
}

/// Exponential smoothing of a measured time (the first measurement is taken as is).
fn smooth(avg: &mut f64, s: f64) {
    *avg = if *avg == 0.0 { s } else { 0.8 * *avg + 0.2 * s };
}

fn rd_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn rd_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

/// Creates `path` with `bytes`, synced to disk.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_data()
}

/// Header of a block file: (hash, parent, tokens, payload_len, checksum).
type Header = (u64, Option<u64>, Vec<u32>, u64, u64);

fn read_header(r: &mut impl Read, salt: u64, block_size: usize) -> std::io::Result<Header> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut m = [0u8; 8];
    r.read_exact(&mut m)?;
    if &m != MAGIC {
        return Err(bad("bad magic"));
    }
    if rd_u64(r)? != salt {
        return Err(bad("other model or KV format"));
    }
    let hash = rd_u64(r)?;
    let mut hp = [0u8; 1];
    r.read_exact(&mut hp)?;
    let parent = rd_u64(r)?;
    let n = rd_u32(r)? as usize;
    if n != block_size {
        return Err(bad("block size differs"));
    }
    let mut tokens = Vec::with_capacity(n);
    for _ in 0..n {
        tokens.push(rd_u32(r)?);
    }
    let len = rd_u64(r)?;
    let sum = rd_u64(r)?;
    Ok((hash, (hp[0] == 1).then_some(parent), tokens, len, sum))
}

impl DiskTier {
    /// Opens (creating) the tier's subdirectory [`SUBDIR`] of `dir`, indexing the valid
    /// blocks already there and deleting its own leftover temp files (nothing else).
    pub fn open(
        dir: &Path,
        cap_bytes: u64,
        salt: u64,
        payload_bytes: usize,
        block_size: usize,
    ) -> std::io::Result<DiskTier> {
        let dir = dir.join(SUBDIR);
        std::fs::create_dir_all(&dir)?;
        let mut found: Vec<(std::time::SystemTime, u64, Entry)> = Vec::new();
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let path = e.path();
            let name = e.file_name();
            let name = name.to_str().unwrap_or("");
            let is_file = e.file_type().is_ok_and(|t| t.is_file());
            match name.strip_suffix(TMP_SUFFIX) {
                Some(stem) if is_file && stem.ends_with(&format!(".{BLOCK_EXT}")) => {
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
                _ => {}
            }
            match path.extension().and_then(|x| x.to_str()) {
                Some(BLOCK_EXT) if is_file => {
                    let ok = std::fs::File::open(&path).and_then(|f| {
                        let meta = f.metadata()?;
                        let mut r = std::io::BufReader::new(f);
                        let (hash, parent, tokens, len, _) = read_header(&mut r, salt, block_size)?;
                        Ok((
                            meta.modified()?,
                            hash,
                            Entry {
                                parent,
                                tokens,
                                bytes: meta.len(),
                            },
                            len,
                        ))
                    });
                    match ok {
                        Ok((t, hash, entry, len)) if len as usize == payload_bytes => {
                            found.push((t, hash, entry))
                        }
                        // Another model's, another format's or a damaged file: not ours to use.
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        found.sort_by_key(|f| f.0);
        let mut tier = DiskTier {
            dir,
            cap_bytes,
            salt,
            payload_bytes,
            index: HashMap::new(),
            order: VecDeque::new(),
            stats: TierStats::default(),
        };
        for (_, hash, entry) in found {
            tier.stats.bytes += entry.bytes;
            tier.order.push_back(hash);
            tier.index.insert(hash, entry);
        }
        tier.stats.blocks = tier.index.len();
        tier.shrink();
        tier.probe()?;
        Ok(tier)
    }

    /// Times one block-sized write (synced, as a spill is) and read-back in the directory,
    /// so the tier's first eviction and fetch decisions use this disk's times, not a guess.
    fn probe(&mut self) -> std::io::Result<()> {
        let path = self.dir.join(format!(
            "probe-{}.{BLOCK_EXT}{TMP_SUFFIX}",
            std::process::id()
        ));
        let buf = vec![0x5au8; self.payload_bytes];
        let t0 = Instant::now();
        let written = write_synced(&path, &buf);
        let t1 = Instant::now();
        let back = written.and_then(|()| std::fs::read(&path));
        let t2 = Instant::now();
        let _ = std::fs::remove_file(&path);
        let back = back?;
        if back != buf {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the probe block read back differs from what was written",
            ));
        }
        self.stats.spill_s_per_block = (t1 - t0).as_secs_f64();
        self.stats.fetch_s_per_block = (t2 - t1).as_secs_f64();
        Ok(())
    }

    fn path(&self, hash: u64) -> PathBuf {
        self.dir
            .join(format!("{:016x}-{hash:016x}.{BLOCK_EXT}", self.salt))
    }

    /// True if the block is in the tier with exactly these tokens.
    pub fn contains(&self, hash: u64, tokens: &[u32]) -> bool {
        self.index.get(&hash).is_some_and(|e| e.tokens == tokens)
    }

    pub fn parent(&self, hash: u64) -> Option<Option<u64>> {
        self.index.get(&hash).map(|e| e.parent)
    }

    /// Writes a block (no-op if already there), then deletes the oldest blocks over the cap.
    pub fn spill(
        &mut self,
        hash: u64,
        parent: Option<u64>,
        tokens: &[u32],
        payload: &[u8],
    ) -> std::io::Result<()> {
        if self.index.contains_key(&hash) || payload.len() != self.payload_bytes {
            return Ok(());
        }
        let t0 = Instant::now();
        let path = self.path(hash);
        let mut tmp = path.clone().into_os_string();
        tmp.push(TMP_SUFFIX);
        let tmp = PathBuf::from(tmp);
        let mut buf = Vec::with_capacity(64 + tokens.len() * 4 + payload.len());
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&self.salt.to_le_bytes());
        buf.extend_from_slice(&hash.to_le_bytes());
        buf.push(parent.is_some() as u8);
        buf.extend_from_slice(&parent.unwrap_or(0).to_le_bytes());
        buf.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
        for t in tokens {
            buf.extend_from_slice(&t.to_le_bytes());
        }
        buf.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        buf.extend_from_slice(&fnv64(payload).to_le_bytes());
        buf.extend_from_slice(payload);
        // A failed write or rename (a full disk) leaves no temp file behind.
        if let Err(e) = write_synced(&tmp, &buf).and_then(|()| std::fs::rename(&tmp, &path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        smooth(
            &mut self.stats.spill_s_per_block,
            t0.elapsed().as_secs_f64(),
        );
        self.stats.spills += 1;
        self.stats.bytes += buf.len() as u64;
        self.index.insert(
            hash,
            Entry {
                parent,
                tokens: tokens.to_vec(),
                bytes: buf.len() as u64,
            },
        );
        self.order.push_back(hash);
        self.stats.blocks = self.index.len();
        self.shrink();
        Ok(())
    }

    fn shrink(&mut self) {
        while self.stats.bytes > self.cap_bytes {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.remove(old);
        }
    }

    fn remove(&mut self, hash: u64) {
        if let Some(e) = self.index.remove(&hash) {
            let _ = std::fs::remove_file(self.path(hash));
            self.stats.bytes = self.stats.bytes.saturating_sub(e.bytes);
            self.order.retain(|&h| h != hash);
            self.stats.blocks = self.index.len();
        }
    }

    /// Reads a block's payload, checking its checksum; a damaged block is dropped.
    pub fn fetch(&mut self, hash: u64) -> Option<Vec<u8>> {
        let t0 = Instant::now();
        let block_size = self.index.get(&hash)?.tokens.len();
        let got = std::fs::File::open(self.path(hash)).and_then(|f| {
            let mut r = std::io::BufReader::new(f);
            let (h, _, _, len, sum) = read_header(&mut r, self.salt, block_size)?;
            let mut payload = vec![0u8; len as usize];
            r.read_exact(&mut payload)?;
            if h != hash || fnv64(&payload) != sum || payload.len() != self.payload_bytes {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "checksum",
                ));
            }
            Ok(payload)
        });
        match got {
            Ok(p) => {
                self.stats.fetches += 1;
                smooth(
                    &mut self.stats.fetch_s_per_block,
                    t0.elapsed().as_secs_f64(),
                );
                Some(p)
            }
            Err(_) => {
                self.stats.fetch_failures += 1;
                self.remove(hash);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("folio-tier-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn spill_fetch_restart_cap_and_corruption() {
        let d = dir("unit");
        let payload = |x: u8| vec![x; 100];
        let mut t = DiskTier::open(&d, 10_000, 7, 100, 2).unwrap();
        t.spill(1, None, &[5, 6], &payload(1)).unwrap();
        t.spill(2, Some(1), &[7, 8], &payload(2)).unwrap();
        assert!(t.contains(2, &[7, 8]));
        assert!(
            !t.contains(2, &[7, 9]),
            "tokens are compared, not just hashes"
        );
        assert_eq!(t.fetch(2), Some(payload(2)));
        // The tier's own stray temp file (crash mid-write) is removed; the user's files,
        // `.tmp` or not, in the directory or even in the tier's subdirectory, are not.
        let sub = d.join(SUBDIR);
        std::fs::write(
            sub.join("0000000000000007-0000000000000009.kvb.tmp"),
            b"part",
        )
        .unwrap();
        std::fs::write(d.join("important.tmp"), b"mine").unwrap();
        std::fs::write(sub.join("notes.tmp"), b"mine").unwrap();
        let mut t = DiskTier::open(&d, 10_000, 7, 100, 2).unwrap();
        assert!(!sub
            .join("0000000000000007-0000000000000009.kvb.tmp")
            .exists());
        assert!(d.join("important.tmp").exists() && sub.join("notes.tmp").exists());
        assert_eq!(t.stats.blocks, 2);
        assert_eq!(t.parent(2), Some(Some(1)));
        assert_eq!(t.fetch(1), Some(payload(1)));
        // Another salt (model / format) sees nothing.
        assert_eq!(
            DiskTier::open(&d, 10_000, 8, 100, 2).unwrap().stats.blocks,
            0
        );
        // Corruption is detected and the block dropped.
        let f = t.path(1);
        let mut bytes = std::fs::read(&f).unwrap();
        let n = bytes.len();
        bytes[n - 1] ^= 0xff;
        std::fs::write(&f, bytes).unwrap();
        assert_eq!(t.fetch(1), None);
        assert!(!t.contains(1, &[5, 6]));
        // The byte cap deletes the oldest first.
        let one = t.stats.bytes;
        let mut t = DiskTier::open(&d, one * 2, 7, 100, 2).unwrap();
        t.spill(3, Some(2), &[9, 9], &payload(3)).unwrap();
        t.spill(4, Some(3), &[9, 8], &payload(4)).unwrap();
        assert_eq!(t.stats.blocks, 2);
        assert!(!t.contains(2, &[7, 8]) && t.contains(4, &[9, 8]));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_failed_write_leaves_no_temp_file() {
        let d = dir("fail");
        let mut t = DiskTier::open(&d, 10_000, 7, 100, 2).unwrap();
        // The block's final name is taken by a non-empty directory: the rename fails, as a
        // write does on a full disk.
        let blocked = t.path(5);
        std::fs::create_dir_all(blocked.join("x")).unwrap();
        assert!(t.spill(5, None, &[1, 2], &[3u8; 100]).is_err());
        let left: Vec<_> = std::fs::read_dir(d.join(SUBDIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "stray temp files: {left:?}");
        assert_eq!(t.stats.blocks, 0);
        let _ = std::fs::remove_dir_all(&d);
    }
}
