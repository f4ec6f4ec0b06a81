//! Chained block hashes: `H(block i) = mix(H(block i−1), tokens of block i)`, rooted in a salt.
//!
//! The salt identifies everything besides the tokens that decides KV content: model,
//! adapter, KV storage format, position rules. Two requests share a block only when the
//! whole chain up to it is equal, which is exactly "identical prefix" (DESIGN.md §kv-cache).
//!
//! NOTE: the hash is FNV-1a over little-endian words followed by a splitmix64 finalizer,
//! written out here rather than `std::hash`, because the engine's disk tier keys spilled
//! blocks by it across runs and std's hasher is not stable across releases. A 64-bit hash can
//! collide, so the prefix cache also compares the stored token ids before reusing a block.

/// Identity of a cached block's content including its whole prefix.
pub type BlockHash = u64;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a of `bytes` (stable across runs and Rust releases: the engine keys files by it).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_extend(FNV_OFFSET, bytes)
}

/// FNV-1a continued from state `h`.
fn fnv1a_extend(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

fn fnv_word(h: u64, w: u64) -> u64 {
    fnv1a_extend(h, &w.to_le_bytes())
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Hash of one block given its parent's hash (`None` for the first block) and the salt.
pub fn block_hash(parent: Option<BlockHash>, salt: u64, tokens: &[u32]) -> BlockHash {
    let mut h = FNV_OFFSET;
    match parent {
        None => {
            h = fnv_word(h, 0);
            h = fnv_word(h, salt);
        }
        Some(p) => {
            h = fnv_word(h, 1);
            h = fnv_word(h, p);
        }
    }
    h = fnv_word(h, tokens.len() as u64);
    for &t in tokens {
        h = fnv_word(h, t as u64);
    }
    splitmix(h)
}

/// The salt a chain in namespace `ns` starts from: `salt` itself for namespace 0 (the
/// base model), else a mix of both. A namespace is what else besides the tokens decides a
/// request's KV: its LoRA adapters and their scales, or a client's `cache_salt`.
pub fn chain_salt(salt: u64, ns: u64) -> u64 {
    if ns == 0 {
        return salt;
    }
    splitmix(fnv_word(fnv_word(FNV_OFFSET, salt), ns))
}

/// Hashes of every full block of `tokens` for block size `p`.
pub fn chain_hashes(salt: u64, tokens: &[u32], p: usize) -> Vec<BlockHash> {
    let mut out = Vec::with_capacity(tokens.len() / p.max(1));
    let mut parent = None;
    for chunk in tokens.chunks_exact(p.max(1)) {
        let h = block_hash(parent, salt, chunk);
        out.push(h);
        parent = Some(h);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_depends_on_prefix_and_salt() {
        let a = chain_hashes(7, &[1, 2, 3, 4, 5, 6], 3);
        let b = chain_hashes(7, &[9, 2, 3, 4, 5, 6], 3);
        let c = chain_hashes(8, &[1, 2, 3, 4, 5, 6], 3);
        assert_eq!(a.len(), 2);
        assert_ne!(
            a[1], b[1],
            "same block content after a different prefix must differ"
        );
        assert_ne!(a[0], c[0], "salt must change the hash");
        assert_eq!(
            a,
            chain_hashes(7, &[1, 2, 3, 4, 5, 6, 7], 3),
            "partial tail ignored"
        );
    }
}
