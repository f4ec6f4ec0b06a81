//! Seeded randomized invariant test over the allocator, sharing, CoW and the prefix cache.
//!
//! A shadow "device memory" (slot → token id) plays the executor: it performs copy orders,
//! writes each sequence's new tokens into its slots, and writes restored blocks. After every
//! operation: structural invariants hold, every sequence reads its own tokens through its
//! block table, and every cached block's recorded tokens equal both the slots' content and
//! the tokens of every sequence that maps it. With a sliding window (hybrid models), the
//! window pages a sequence still holds and every cached window set are checked the same way.

use std::collections::{BTreeMap, HashMap};

use folio_core::kv::{EvictionPolicy, KvConfig, KvError, KvManager, StepId, WindowKv, RELEASED};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

struct World {
    m: KvManager,
    p: usize,
    mem: Vec<Option<u32>>,
    seqs: BTreeMap<u64, Vec<u32>>,
    steps: Vec<StepId>,
    tier: HashMap<u64, (Option<u64>, Vec<u32>)>,
    next_id: u64,
    next_step: u64,
}

impl World {
    fn new(num_blocks: usize, p: usize, policy: EvictionPolicy, window: Option<WindowKv>) -> Self {
        let cfg = KvConfig {
            num_blocks,
            block_size: p,
            eviction: policy,
            window,
            ..KvConfig::default()
        };
        Self {
            m: KvManager::new(cfg).unwrap(),
            p,
            mem: vec![None; num_blocks * p],
            seqs: BTreeMap::new(),
            steps: Vec::new(),
            tier: HashMap::new(),
            next_id: 0,
            next_step: 0,
        }
    }

    /// Executor side: spill evicted blocks, perform copies, then write `tokens[from..]`.
    fn execute(&mut self, id: u64, from: usize) {
        for e in self.m.take_evicted() {
            let base = e.block as usize * self.p;
            let data: Vec<u32> = self.mem[base..base + self.p]
                .iter()
                .map(|s| s.unwrap())
                .collect();
            assert_eq!(
                data, e.tokens,
                "evicted block content differs from its record"
            );
            self.tier.insert(e.hash, (e.parent, e.tokens));
        }
        for c in self.m.take_copy_ops() {
            for i in 0..c.num_tokens {
                self.mem[c.dst as usize * self.p + i] = self.mem[c.src as usize * self.p + i];
            }
        }
        let toks = self.seqs[&id].clone();
        let win = self.m.window_tables(id);
        for (pos, &t) in toks.iter().enumerate().skip(from) {
            let slot = self.m.slot(id, pos).expect("grown table covers new tokens");
            self.mem[slot] = Some(t);
            for table in &win {
                let b = table[pos / self.p];
                assert_ne!(
                    b, RELEASED,
                    "seq {id}: new position {pos} has no window page"
                );
                self.mem[b as usize * self.p + pos % self.p] = Some(t);
            }
        }
        self.m.commit(id, &toks, toks.len()).unwrap();
    }

    fn check(&self) {
        self.m.check_invariants().unwrap();
        for (id, toks) in &self.seqs {
            let t = self.m.table(*id).unwrap();
            assert_eq!(t.num_tokens, toks.len());
            for (pos, &tok) in toks.iter().enumerate() {
                let slot = self.m.slot(*id, pos).unwrap();
                assert_eq!(
                    self.mem[slot],
                    Some(tok),
                    "seq {id} pos {pos} reads foreign KV"
                );
            }
            for table in self.m.window_tables(*id) {
                for (pos, &tok) in toks.iter().enumerate() {
                    let b = table[pos / self.p];
                    if b != RELEASED {
                        assert_eq!(
                            self.mem[b as usize * self.p + pos % self.p],
                            Some(tok),
                            "seq {id} pos {pos} reads foreign window KV"
                        );
                    }
                }
            }
            for (i, &b) in t.blocks.iter().enumerate() {
                if let Some(h) = self.m.cache().hash_of_block(b) {
                    let e = self.m.cache().get(h).unwrap();
                    if (i + 1) * self.p <= toks.len() {
                        assert_eq!(e.tokens, toks[i * self.p..(i + 1) * self.p]);
                    }
                }
            }
        }
        for e in self.m.cache().entries() {
            let base = e.block as usize * self.p;
            let data: Vec<Option<u32>> = e.tokens.iter().map(|&t| Some(t)).collect();
            assert_eq!(
                self.mem[base..base + self.p],
                data[..],
                "cached block {} content",
                e.block
            );
        }
        for (h, set) in self.m.window_cache().entries() {
            let tokens = &self
                .m
                .cache()
                .get(*h)
                .expect("set has its full block")
                .tokens;
            for &b in &set.pages {
                let base = b as usize * self.p;
                let data: Vec<Option<u32>> = tokens.iter().map(|&t| Some(t)).collect();
                assert_eq!(self.mem[base..base + self.p], data[..], "window page {b}");
            }
        }
        let s = self.m.stats();
        assert_eq!(
            s.free_blocks + s.used_blocks + s.evictable_blocks,
            s.total_blocks
        );
    }

    fn random_seq(&self, rng: &mut StdRng) -> Option<u64> {
        if self.seqs.is_empty() {
            return None;
        }
        let i = rng.gen_range(0..self.seqs.len());
        self.seqs.keys().nth(i).copied()
    }

    fn op(&mut self, rng: &mut StdRng) {
        match rng.gen_range(0..100) {
            0..=19 => {
                // New sequence from a tiny vocabulary so prefixes collide.
                let len = rng.gen_range(0..24);
                let toks: Vec<u32> = (0..len).map(|_| rng.gen_range(0..3)).collect();
                let id = self.next_id;
                self.next_id += 1;
                let cached = self.m.create_seq(id, &toks).unwrap();
                assert_eq!(cached % self.p, 0);
                assert!(cached < toks.len().max(1));
                self.seqs.insert(id, toks.clone());
                match self.m.grow(id, toks.len()) {
                    Ok(()) => self.execute(id, cached),
                    Err(KvError::OutOfBlocks { .. }) => {
                        self.m.free_seq(id);
                        self.seqs.remove(&id);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            20..=44 => {
                let Some(id) = self.random_seq(rng) else {
                    return;
                };
                let k = rng.gen_range(1..6);
                let old = self.seqs[&id].len();
                match self.m.grow(id, old + k) {
                    Ok(()) => {
                        let s = self.seqs.get_mut(&id).unwrap();
                        s.extend((0..k).map(|_| rng.gen_range(0..3)));
                        self.execute(id, old);
                    }
                    Err(KvError::OutOfBlocks { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            45..=54 => {
                let Some(parent) = self.random_seq(rng) else {
                    return;
                };
                let child = self.next_id;
                self.next_id += 1;
                self.m.fork(parent, child).unwrap();
                self.seqs.insert(child, self.seqs[&parent].clone());
            }
            55..=66 => {
                let Some(id) = self.random_seq(rng) else {
                    return;
                };
                assert!(self.m.free_seq(id));
                self.seqs.remove(&id);
            }
            67..=76 => {
                // A step reads a random subset; sometimes one of them is cancelled at once.
                let ids: Vec<u64> = self
                    .seqs
                    .keys()
                    .copied()
                    .filter(|_| rng.gen_bool(0.4))
                    .collect();
                let step = StepId(self.next_step);
                self.next_step += 1;
                self.m.hold_step(step, &ids);
                self.steps.push(step);
                if let Some(&victim) = ids.first() {
                    if rng.gen_bool(0.5) {
                        self.m.free_seq(victim);
                        self.seqs.remove(&victim);
                    }
                }
            }
            77..=86 => {
                if !self.steps.is_empty() {
                    let i = rng.gen_range(0..self.steps.len());
                    let step = self.steps.swap_remove(i);
                    assert!(self.m.release_step(step));
                }
            }
            87..=93 => {
                let Some(id) = self.random_seq(rng) else {
                    return;
                };
                let len = self.seqs[&id].len();
                let keep = rng.gen_range(0..=len);
                match self.m.truncate(id, keep) {
                    Ok(()) => self.seqs.get_mut(&id).unwrap().truncate(keep),
                    Err(KvError::BehindWindow { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            _ => {
                // Restore a spilled block whose parent is cached (or a root block).
                let cands: Vec<u64> = {
                    let mut v: Vec<u64> = self
                        .tier
                        .iter()
                        .filter(|(h, (par, _))| {
                            self.m.cache().get(**h).is_none()
                                && par.is_none_or(|ph| self.m.cache().get(ph).is_some())
                        })
                        .map(|(h, _)| *h)
                        .collect();
                    v.sort();
                    v
                };
                if cands.is_empty() {
                    return;
                }
                let h = cands[rng.gen_range(0..cands.len())];
                let (parent, toks) = self.tier[&h].clone();
                match self.m.restore_block(parent, &toks) {
                    Ok(b) => {
                        for e in self.m.take_evicted() {
                            self.tier.insert(e.hash, (e.parent, e.tokens));
                        }
                        for (i, &t) in toks.iter().enumerate() {
                            self.mem[b as usize * self.p + i] = Some(t);
                        }
                    }
                    Err(KvError::OutOfBlocks { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
}

fn run(seed: u64, num_blocks: usize, p: usize, policy: EvictionPolicy, window: Option<WindowKv>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut w = World::new(num_blocks, p, policy, window);
    for _ in 0..4000 {
        w.op(&mut rng);
        w.check();
    }
    let s = w.m.stats();
    eprintln!("seed {seed}: {s:?}");
    assert!(
        s.prefix_hit_tokens > 0,
        "tiny vocabulary must produce prefix hits"
    );
    assert!(
        s.evictions > 0 && s.cow_copies > 0,
        "pool must be small enough to evict and fork must copy"
    );
    if window.is_some() {
        assert!(
            s.window_released_blocks > 0,
            "sequences must outgrow the window"
        );
    }
    for id in w.seqs.keys().copied().collect::<Vec<_>>() {
        w.m.free_seq(id);
    }
    for step in std::mem::take(&mut w.steps) {
        w.m.release_step(step);
    }
    w.m.evict_all();
    w.seqs.clear();
    w.check();
    assert_eq!(w.m.num_free(), num_blocks, "blocks leaked");
}

#[test]
fn random_ops_keep_invariants_value_policy() {
    for seed in 0..6 {
        run(seed, 24, 2, EvictionPolicy::ValuePerByte, None);
    }
}

#[test]
fn random_ops_keep_invariants_lru_policy() {
    for seed in 100..104 {
        run(seed, 32, 3, EvictionPolicy::Lru, None);
    }
}

/// The same operations on a hybrid layout: 2 window pages per block, a 5-token window (so
/// sequences of up to ~30 tokens release blocks, and a block can be released before it is
/// committed when one grow follows another).
#[test]
fn random_ops_keep_invariants_sliding_window() {
    let window = Some(WindowKv {
        tokens: 5,
        pages: 2,
    });
    for seed in 200..206 {
        run(seed, 72, 2, EvictionPolicy::ValuePerByte, window);
    }
    for seed in 300..303 {
        run(seed, 96, 3, EvictionPolicy::Lru, window);
    }
}
