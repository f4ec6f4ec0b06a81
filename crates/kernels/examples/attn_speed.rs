//! Single-thread speed of the attention kernel for one decode token (G query heads over one
//! KV head), hot cache: `cargo run --release -p folio-kernels --example attn_speed [ctx] [g]`.

use folio_kernels::attn::{self, KvFormat, PagedKv, Paging, Queries, SumOrder};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ctx: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(256);
    let g: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let ghz: f64 = std::env::var("GHZ")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.87);
    let (hd, bs) = (64, 16);
    let isa = folio_kernels::cpu::isa();
    for format in [KvFormat::F16, KvFormat::Q8_0, KvFormat::Q4h] {
        let rb = format.row_bytes(hd);
        let blocks = ctx.div_ceil(bs);
        let bytes = vec![0x11u8; blocks * bs * rb];
        let paging = Paging {
            block_size: bs,
            block_rows: bs,
            head_row: 0,
        };
        let kv = PagedKv::new(&bytes, &bytes, (format, format), hd, paging);
        let table: Vec<u32> = (0..blocks as u32).rev().collect();
        let q: Vec<f32> = (0..g * hd).map(|i| (i % 7) as f32 * 0.01).collect();
        let mut scores = Vec::new();
        let mut out = vec![0f32; g * hd];
        for order in [SumOrder::Batched, SumOrder::Single] {
            let qs = Queries {
                q: &q,
                n: g,
                scale: 0.125,
                order,
                first: 0,
                softcap: None,
                sinks: None,
            };
            let reps = 20000;
            for _ in 0..reps / 10 {
                attn::attend_with(isa, &kv, &table, ctx, &qs, &mut scores, &mut out);
            }
            let t = Instant::now();
            for _ in 0..reps {
                attn::attend_with(isa, &kv, &table, ctx, &qs, &mut scores, &mut out);
            }
            let s = t.elapsed().as_secs_f64() / reps as f64;
            println!(
                "{:?} {order:?} ctx={ctx} g={g}: {:.2} us, {:.1} cycles/position",
                format,
                s * 1e6,
                s * ghz * 1e9 / ctx as f64
            );
        }
    }
}
