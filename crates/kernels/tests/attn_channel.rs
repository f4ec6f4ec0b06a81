//! q4c, keys quantized per channel over a page of 16 tokens: the group encoding against its
//! definition, outlier channels kept where a per-token 4-bit scale loses the rest, and
//! attention over encoded and staged pages within a stated tolerance of f64 attention over
//! the decoded rows, on every ISA this host runs.

mod common;

use common::{outlier_row, rand_vec};
use folio_kernels::attn::channel::{self, G, NONE};
use folio_kernels::attn::{self, KvFormat, PagedKv, Paging, Queries, Staged, SumOrder};
use folio_kernels::Isa;
use half::f16;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

fn group_bytes(hd: usize) -> usize {
    G * KvFormat::Q4c.row_bytes(hd)
}

/// Channel `c`'s (scale, min) as stored in a group.
fn channel_range(hd: usize, group: &[u8], c: usize) -> (f32, f32) {
    let h = &group[G * hd / 2..];
    let at = |i: usize| f16::from_le_bytes([h[2 * i], h[2 * i + 1]]).to_f32();
    (at(c), at(hd + c))
}

#[test]
fn a_group_decodes_to_its_definition() {
    let hd = 64;
    let mut r = StdRng::seed_from_u64(1);
    let rows: Vec<f32> = (0..G).flat_map(|_| outlier_row(hd, &mut r)).collect();
    let mut g = vec![0u8; group_bytes(hd)];
    channel::encode_group(hd, &rows, u16::MAX, &mut g);
    let mut y = vec![0f32; hd];
    for row in 0..G {
        channel::decode_row(hd, &g, row, &mut y);
        for c in 0..hd {
            let (d, m) = channel_range(hd, &g, c);
            // value = min + code · scale, code in 0..=15 (the definition) ...
            let code = ((y[c] - m) / d.max(f32::MIN_POSITIVE)).round();
            assert!(
                (0.0..=15.0).contains(&code),
                "row {row} ch {c}: code {code}"
            );
            assert!((m + code * d - y[c]).abs() <= 1e-6 * y[c].abs().max(1.0));
            // ... and within half a step (plus the f16 rounding of min and scale) of x.
            let x = rows[row * hd + c];
            assert!(
                (x - y[c]).abs() <= 0.5 * d + 2e-3 * x.abs().max(1.0),
                "row {row} ch {c}: {x} -> {} (scale {d})",
                y[c]
            );
        }
    }
    // The channel's range is its own: the minimum is the channel's minimum (in f16).
    for c in 0..hd {
        let lo = (0..G)
            .map(|i| rows[i * hd + c])
            .fold(f32::INFINITY, f32::min);
        assert_eq!(channel_range(hd, &g, c).1, f16::from_f32(lo).to_f32());
    }
}

#[test]
fn a_partial_group_ranges_over_its_written_rows_only() {
    let hd = 32;
    let mut r = StdRng::seed_from_u64(2);
    let mut rows: Vec<f32> = (0..G).flat_map(|_| rand_vec(hd, &mut r, 1.0)).collect();
    // Rows 5.. are stale: huge values that must not widen any range.
    rows[5 * hd..].iter_mut().for_each(|x| *x = 1e4);
    let mut g = vec![0u8; group_bytes(hd)];
    channel::encode_group(hd, &rows, 0b1_1111, &mut g);
    for c in 0..hd {
        let (d, _) = channel_range(hd, &g, c);
        assert!(d <= 2.0 / 15.0 + 1e-3, "ch {c}: scale {d}");
    }
    let mut y = vec![0f32; hd];
    channel::decode_row(hd, &g, 7, &mut y);
    // An unwritten row has code 0: each channel's minimum.
    for (c, v) in y.iter().enumerate() {
        assert_eq!(*v, channel_range(hd, &g, c).1);
    }
}

#[test]
fn outlier_channels_keep_the_other_channels_where_q4_0_loses_them() {
    let hd = 128;
    let mut r = StdRng::seed_from_u64(3);
    let rows: Vec<f32> = (0..G).flat_map(|_| outlier_row(hd, &mut r)).collect();
    let mut g = vec![0u8; group_bytes(hd)];
    channel::encode_group(hd, &rows, u16::MAX, &mut g);
    let outlier = |c: usize| c == 3 || c == hd / 2 + 1;
    let (mut worst_c, mut worst_q) = (0f32, 0f32);
    let mut y = vec![0f32; hd];
    let mut b = vec![0u8; KvFormat::Q4_0.row_bytes(hd)];
    for row in 0..G {
        let x = &rows[row * hd..(row + 1) * hd];
        channel::decode_row(hd, &g, row, &mut y);
        let mut yq = vec![0f32; hd];
        attn::store_row_scalar(KvFormat::Q4_0, x, &mut b);
        attn::load_row_scalar(KvFormat::Q4_0, &b, &mut yq);
        for c in (0..hd).filter(|&c| !outlier(c)) {
            worst_c = worst_c.max((x[c] - y[c]).abs());
            worst_q = worst_q.max((x[c] - yq[c]).abs());
        }
    }
    eprintln!("non-outlier channels: q4c worst {worst_c}, q4_0 worst {worst_q}");
    // Values in ±1 with outliers of 40: q4_0's step is ~40/8 = 5 in the outliers' groups,
    // q4c's is 2/15 on every other channel.
    assert!(worst_c < 0.07, "q4c {worst_c}");
    assert!(worst_q > 10.0 * worst_c, "q4_0 {worst_q} vs q4c {worst_c}");
}

/// One layer of `heads` KV heads in 16-token pages: K in q4c (pages `staged` kept in f16
/// staging, the rest encoded), V in `vf`; plus every row as attention should see it.
struct Layer {
    k: Vec<u8>,
    v: Vec<u8>,
    vf: KvFormat,
    hd: usize,
    heads: usize,
    table: Vec<u32>,
    slot_of: Vec<u32>,
    rows: Vec<f16>,
    /// Decoded K and V of (head, position).
    seen: Vec<(Vec<f32>, Vec<f32>)>,
}

impl Layer {
    fn new(vf: KvFormat, hd: usize, heads: usize, n_ctx: usize, staged: &[usize]) -> Layer {
        let mut r = StdRng::seed_from_u64(n_ctx as u64);
        let n_blocks = n_ctx.div_ceil(G) + 2;
        let mut table: Vec<u32> = (0..n_blocks as u32).collect();
        table.shuffle(&mut r);
        let (kr, vr) = (KvFormat::Q4c.row_bytes(hd), vf.row_bytes(hd));
        let mut k = vec![0u8; n_blocks * heads * G * kr];
        let mut v = vec![0u8; n_blocks * heads * G * vr];
        let mut slot_of = vec![NONE; n_blocks];
        let mut rows = Vec::new();
        let mut seen = vec![(vec![], vec![]); heads * n_blocks * G];
        for page in 0..n_blocks {
            let b = table[page] as usize;
            let is_staged = staged.contains(&page);
            if is_staged {
                slot_of[b] = (rows.len() / (heads * G * hd)) as u32;
            }
            for h in 0..heads {
                let keys: Vec<f32> = (0..G).flat_map(|_| outlier_row(hd, &mut r)).collect();
                let gb = (b * heads + h) * G * kr;
                channel::encode_group(hd, &keys, u16::MAX, &mut k[gb..gb + G * kr]);
                for s in 0..G {
                    let mut kk = vec![0f32; hd];
                    if is_staged {
                        let row = &keys[s * hd..(s + 1) * hd];
                        rows.extend(row.iter().map(|&x| f16::from_f32(x)));
                        kk = row.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
                    } else {
                        channel::decode_row(hd, &k[gb..gb + G * kr], s, &mut kk);
                    }
                    let i = (b * heads + h) * G + s;
                    let vrow = rand_vec(hd, &mut r, 1.0);
                    attn::store_row_scalar(vf, &vrow, &mut v[i * vr..(i + 1) * vr]);
                    let mut vv = vec![0f32; hd];
                    attn::load_row_unrotated(vf, &v[i * vr..(i + 1) * vr], &mut vv);
                    seen[h * n_blocks * G + page * G + s] = (kk, vv);
                }
            }
        }
        Layer {
            k,
            v,
            vf,
            hd,
            heads,
            table,
            slot_of,
            rows,
            seen,
        }
    }

    fn view(&self, head: usize) -> PagedKv<'_> {
        let paging = Paging {
            block_size: G,
            block_rows: self.heads * G,
            head_row: head * G,
        };
        PagedKv::new(&self.k, &self.v, (KvFormat::Q4c, self.vf), self.hd, paging).with_staged(
            Staged {
                slot_of: &self.slot_of,
                rows: &self.rows,
                heads: self.heads,
            },
        )
    }

    /// f64 attention over the rows as attention should see them.
    fn reference(
        &self,
        head: usize,
        q: &[f32],
        n_q: usize,
        qs: &Queries,
        n_ctx: usize,
    ) -> Vec<f32> {
        let hd = self.hd;
        let n_blocks = self.table.len();
        let mut out = vec![0f32; n_q * hd];
        for g in 0..n_q {
            let qg = &q[g * hd..(g + 1) * hd];
            let mut s: Vec<f64> = (qs.first..n_ctx)
                .map(|p| {
                    let (k, _) = &self.seen[head * n_blocks * G + p];
                    let dot: f64 = qg.iter().zip(k).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let x = dot * qs.scale as f64;
                    match qs.softcap {
                        Some(c) => c as f64 * (x / c as f64).tanh(),
                        None => x,
                    }
                })
                .collect();
            let sink = qs.sink(g).map(|x| x as f64);
            let m = s
                .iter()
                .copied()
                .chain(sink)
                .fold(f64::NEG_INFINITY, f64::max);
            s.iter_mut().for_each(|x| *x = (*x - m).exp());
            let z: f64 = s.iter().sum::<f64>() + sink.map_or(0.0, |x| (x - m).exp());
            for (j, p) in (qs.first..n_ctx).enumerate() {
                let (_, v) = &self.seen[head * n_blocks * G + p];
                for d in 0..hd {
                    out[g * hd + d] += (s[j] / z * v[d] as f64) as f32;
                }
            }
        }
        out
    }
}

#[test]
fn attention_over_encoded_and_staged_pages_matches_f64_on_every_isa() {
    let (hd, heads, n_q) = (128, 2, 3);
    for (vf, n_ctx, staged) in [
        (KvFormat::F16, 53, vec![3]),
        (KvFormat::Q4h, 40, vec![2]),
        (KvFormat::Q8_0, 16, vec![]),
        (KvFormat::Iq4Nl, 71, vec![0, 4]),
    ] {
        let layer = Layer::new(vf, hd, heads, n_ctx, &staged);
        let mut r = StdRng::seed_from_u64(9);
        let q: Vec<f32> = rand_vec(n_q * hd, &mut r, 1.0)
            .into_iter()
            .map(|x| f16::from_f32(x).to_f32())
            .collect();
        let sinks = [0.5f32, -1.0, 2.0];
        for (first, softcap, sinks) in [
            (0, None, None),
            (n_ctx / 3, Some(20.0), None),
            (0, None, Some(&sinks[..])),
        ] {
            let qs = Queries {
                q: &q,
                n: n_q,
                scale: 1.0 / (hd as f32).sqrt(),
                order: SumOrder::Batched,
                first,
                softcap,
                sinks,
            };
            for head in 0..heads {
                let want = layer.reference(head, &q, n_q, &qs, n_ctx);
                let mut first_isa: Option<Vec<f32>> = None;
                for isa in Isa::available() {
                    let mut out = vec![0f32; n_q * hd];
                    let mut scratch = Vec::new();
                    let kv = layer.view(head);
                    attn::attend_with(isa, &kv, &layer.table, n_ctx, &qs, &mut scratch, &mut out);
                    let worst = out
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0f32, f32::max);
                    // The kernels round the probabilities to f16 (llama.cpp's softmax);
                    // values are ~1, so 2^-10 relative is the scale of the difference.
                    assert!(
                        worst < 2e-3,
                        "{isa:?} v={} n_ctx {n_ctx} first {first} head {head}: {worst}",
                        vf.name()
                    );
                    // Every ISA agrees with the scalar reference within reassociation.
                    match &first_isa {
                        None => first_isa = Some(out),
                        Some(s) => {
                            let d = out
                                .iter()
                                .zip(s)
                                .map(|(a, b)| (a - b).abs())
                                .fold(0f32, f32::max);
                            assert!(d < 1e-4, "{isa:?} vs scalar: {d}");
                        }
                    }
                }
            }
        }
    }
}
