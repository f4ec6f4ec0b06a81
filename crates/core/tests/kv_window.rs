//! Sliding-window KV (hybrid models): exact pages released behind the window, prefix reuse
//! that knows which window pages are gone, copy-on-write of window pages, and preemption
//! through the scheduler, with the invariant checker after every step.

use folio_core::kv::{KvConfig, KvError, KvManager, StepId, WindowKv, RELEASED};
use folio_core::sched::{Request, RequestResult, Scheduler, SchedulerConfig};

const R: u32 = RELEASED;

/// p = 4, a window of 8 positions, 2 window pages per block.
fn config(num_blocks: usize) -> KvConfig {
    KvConfig {
        num_blocks,
        block_size: 4,
        window: Some(WindowKv {
            tokens: 8,
            pages: 2,
        }),
        ..KvConfig::default()
    }
}

fn manager(num_blocks: usize) -> KvManager {
    KvManager::new(config(num_blocks)).unwrap()
}

fn toks(n: usize, base: u32) -> Vec<u32> {
    (0..n as u32).map(|i| base + i).collect()
}

#[test]
fn window_pages_are_released_behind_the_window() {
    let mut m = manager(32);
    let t = toks(12, 100);
    assert_eq!(m.create_seq(1, &t).unwrap(), 0);
    m.grow(1, 12).unwrap();
    // Full pages first, then the window pages of each new block.
    assert_eq!(m.table(1).unwrap().blocks, vec![0, 1, 2]);
    assert_eq!(m.window_tables(1), vec![vec![3, 5, 7], vec![4, 6, 8]]);
    m.commit(1, &t, 12).unwrap();
    // Decoding position 12 sees 5..=12: block 0 (0..4) is behind the window.
    m.grow(1, 13).unwrap();
    assert_eq!(m.table(1).unwrap().blocks, vec![0, 1, 2, 9]);
    assert_eq!(
        m.window_tables(1),
        vec![vec![R, 5, 7, 10], vec![R, 6, 8, 11]]
    );
    let s = m.stats();
    assert_eq!(s.window_released_blocks, 1);
    // Block 0's window pages were committed: they stay cached, unreferenced.
    assert_eq!(
        (s.used_blocks, s.evictable_blocks, s.free_blocks),
        (10, 2, 20)
    );
    m.check_invariants().unwrap();
    // Positions 13..=16 (block 4 starts at 16): the query at 16 sees 9..=16, so block 1 goes.
    m.grow(1, 16).unwrap();
    assert_eq!(m.window_tables(1)[0], vec![R, 5, 7, 10]);
    m.grow(1, 17).unwrap();
    assert_eq!(m.window_tables(1)[0], vec![R, R, 7, 10, 13]);
    // Block 1 was committed at 12 tokens, so its window pages stay cached too. A rollback
    // whose window reaches back into released pages is refused; one inside it is allowed.
    assert!(matches!(
        m.truncate(1, 10),
        Err(KvError::BehindWindow {
            num_tokens: 10,
            released_blocks: 2,
            first_visible_block: 0
        })
    ));
    m.truncate(1, 16).unwrap();
    assert_eq!(m.window_tables(1)[0], vec![R, R, 7, 10]);
    m.check_invariants().unwrap();
    // Freeing returns every page: none leaked.
    m.free_seq(1);
    m.evict_all();
    m.check_invariants().unwrap();
    assert_eq!(m.num_free(), 32);
}

#[test]
fn a_long_sequence_holds_fewer_pages_than_all_global() {
    // 4,000 positions, p = 16, W = 512, 5 window pages per block (Gemma 3 270M's shape).
    let hybrid = |tokens: usize| {
        let mut m = KvManager::new(KvConfig {
            num_blocks: 4096,
            block_size: 16,
            prefix_cache: false,
            window: Some(WindowKv { tokens, pages: 5 }),
            ..KvConfig::default()
        })
        .unwrap();
        m.create_seq(7, &[]).unwrap();
        for n in (512..=4000).step_by(512).chain([4000]) {
            m.grow(7, n).unwrap();
        }
        m.grow(7, 4001).unwrap();
        m.check_invariants().unwrap();
        m.stats().used_blocks
    };
    // Decoding at 4,000: blocks 218.. are in the window (33), every full block is held.
    assert_eq!(hybrid(512), 251 + 5 * 33);
    assert_eq!(hybrid(usize::MAX), 251 * 6);
}

#[test]
fn prefix_reuse_stops_where_window_pages_were_released() {
    let mut m = manager(64);
    // Sequence 1 computes 24 tokens in two steps without committing in between: the second
    // grow releases blocks 0..3 before they were ever cached.
    let t = toks(24, 0);
    m.create_seq(1, &t[..20]).unwrap();
    m.grow(1, 20).unwrap();
    m.grow(1, 24).unwrap();
    m.commit(1, &t, 24).unwrap();
    assert_eq!(m.window_tables(1)[0][..3], [R, R, R]);
    assert_eq!(m.cache().len(), 6, "every full block is cached");
    assert_eq!(
        m.window_cache().len(),
        3,
        "window pages only for blocks 3..6"
    );
    // The whole 24 tokens plus one: the query at 24 needs window blocks 4 and 5, cached.
    let mut long = t.clone();
    long.push(999);
    let hit = m.match_prefix(&long);
    assert_eq!(
        (hit.num_blocks, hit.num_tokens, hit.num_pages),
        (6, 24, 6 + 2 * 2)
    );
    // Only the first 12 tokens shared: blocks 0..3 are cached as full pages, but every
    // shorter hit needs a released window page, so nothing is reusable.
    let mut short = t[..12].to_vec();
    short.extend([500, 501, 502]);
    assert_eq!(m.match_prefix(&short).num_blocks, 0);
    assert_eq!(m.create_seq(2, &short).unwrap(), 0);
    // The long one attaches 6 full pages and the window pages of blocks 4 and 5 only.
    assert_eq!(m.create_seq(3, &long).unwrap(), 24);
    let w1 = m.window_tables(1);
    let w3 = m.window_tables(3);
    assert_eq!(w3[0][..4], [R, R, R, R]);
    assert_eq!(w3[0][4..], w1[0][4..6]);
    assert_eq!(w3[1][4..], w1[1][4..6]);
    assert_eq!(m.table(3).unwrap().blocks, m.table(1).unwrap().blocks);
    m.check_invariants().unwrap();
}

#[test]
fn shared_partial_tail_copies_its_window_pages() {
    let mut m = manager(32);
    let t = toks(6, 0);
    m.create_seq(1, &t).unwrap();
    m.grow(1, 6).unwrap();
    m.fork(1, 2).unwrap();
    // Block 1 holds positions 4, 5 of both: the child's next write copies the full page
    // and both window pages of that block.
    m.grow(2, 7).unwrap();
    let ops = m.take_copy_ops();
    let pairs: Vec<(u32, u32, usize)> = ops.iter().map(|c| (c.src, c.dst, c.num_tokens)).collect();
    assert_eq!(pairs, vec![(1, 6, 2), (4, 7, 2), (5, 8, 2)]);
    assert_eq!(m.table(2).unwrap().blocks, vec![0, 6]);
    assert_eq!(m.window_tables(2), vec![vec![2, 7], vec![3, 8]]);
    assert_eq!(m.window_tables(1), vec![vec![2, 4], vec![3, 5]]);
    m.hold_step(StepId(1), &[2]);
    m.check_invariants().unwrap();
    m.release_step(StepId(1));
    m.check_invariants().unwrap();
}

/// Three requests whose prompts and outputs outgrow a pool that holds one of them whole:
/// the scheduler preempts and recomputes, every step keeps the invariants, and all finish
/// with the tokens a one-at-a-time run gives.
#[test]
fn preemption_with_window_pages() {
    let run = |num_blocks: usize| {
        let cfg = SchedulerConfig {
            kv: config(num_blocks),
            token_budget: 64,
            max_chunk: 16,
            ..SchedulerConfig::default()
        };
        let mut s = Scheduler::new(cfg).unwrap();
        for id in 0..3u64 {
            let prompt = toks(30, 10 * id as u32);
            s.add_request(Request::new(id, prompt, 20)).unwrap();
        }
        let mut outputs = std::collections::BTreeMap::new();
        let mut steps = 0;
        while s.has_unfinished() {
            let out = s.schedule();
            assert!(!out.is_empty(), "stuck with work left");
            s.kv().check_invariants().unwrap();
            let results: Vec<RequestResult> = out
                .requests
                .iter()
                .filter(|r| r.sample)
                .map(|r| {
                    // A deterministic "model": the next token is a function of position.
                    let pos = r.start_pos + r.token_ids.len();
                    RequestResult {
                        id: r.id,
                        new_token_ids: vec![(pos as u32 * 7 + r.id as u32) % 1000],
                        finish: None,
                    }
                })
                .collect();
            for f in s.update(&out, &results) {
                outputs.insert(f.id, f.output().to_vec());
            }
            s.kv().check_invariants().unwrap();
            steps += 1;
            assert!(steps < 10_000);
        }
        (outputs, s.stats().preemptions, s.kv_stats())
    };
    let (roomy, p0, _) = run(256);
    assert_eq!(p0, 0);
    // 50 positions = 13 blocks: 13 full pages + 2 × at most 5 window blocks ≈ 23 pages
    // each; 40 pages cannot hold three.
    let (tight, p1, kv) = run(40);
    assert!(p1 > 0, "the small pool must preempt");
    assert_eq!(tight, roomy);
    assert!(kv.window_released_blocks > 0);
    assert_eq!(kv.used_blocks, 0);
}
