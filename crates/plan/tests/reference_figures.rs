//! Issue 8, acceptance 1: DESIGN.md's worked examples, pinned at their printed rounding.

use folio_plan::cache::{prefix_value, CacheValue};
use folio_plan::capacity::{branches, capacity, lora, paging, shared, Shape};
use folio_plan::compress::{crossover, read_saving, unified_fit};
use folio_plan::desk::{desk, reference_candidates, DeskCalibration, DeskWorkload, Verdict};
use folio_plan::efficiency::EfficiencyTable;
use folio_plan::hardware::{m2_max, rtx_pro_6000};
use folio_plan::model::{llama2_13b, qwen3_235b_a22b, qwen3_8b};
use folio_plan::offload::{compressed_transfer, offload};
use folio_plan::roofline::{b_kv, bytes_per_token};
use folio_plan::spec::{
    draft_length, draft_sources, expected_tokens_const, payback, spec_row, DraftCost,
};
use folio_plan::units::{GB, GIB, MIB};
use folio_plan::{serving, KvFormat};

/// `v` rounded to `d` decimals, as DESIGN.md prints it.
fn r(v: f64, d: usize) -> String {
    format!("{v:.d$}")
}

const KV12: u64 = 12 << 30;

fn short() -> Shape {
    Shape {
        input: 2048,
        output: 256,
    }
}

fn long() -> Shape {
    Shape {
        input: 8192,
        output: 256,
    }
}

#[test]
fn kv_bytes_per_request_and_capacity() {
    let m = qwen3_8b();
    assert_eq!(m.kv_bytes_per_token(), 147_456);
    assert_eq!(m.kv_bytes_per_token() as f64 / 1024.0, 144.0);
    assert_eq!(m.weight_read_bytes(), 15_136_811_008);
    let c = capacity(
        &m,
        KvFormat::Bf16,
        &[("2K", short()), ("8K", long())],
        16,
        KV12,
        None,
    )
    .unwrap();
    let (s, l) = (&c.rows[0], &c.rows[1]);
    assert_eq!((s.final_tokens, l.final_tokens), (2304, 8448));
    assert_eq!(s.prefill_bytes as f64 / MIB, 288.0);
    assert_eq!(s.final_bytes as f64 / MIB, 324.0);
    assert_eq!(l.prefill_bytes as f64 / MIB, 1152.0);
    assert_eq!(l.final_bytes as f64 / MIB, 1188.0);
    assert_eq!((s.capacity, l.capacity), (37, 10));
    // Sizing by post-prefill KV admits 42 and runs out half way: 42 × 324 = 13,608 MiB.
    assert_eq!(s.capacity_post_prefill, 42);
    assert_eq!(s.post_prefill_final_bytes as f64 / MIB, 13_608.0);
    assert!(s.post_prefill_final_bytes > KV12);
}

#[test]
fn batching_amortizes_weights_not_kv() {
    let m = qwen3_8b();
    assert_eq!((b_kv(&m, 2048), b_kv(&m, 8192)), (51, 13));
    assert_eq!(r(bytes_per_token(&m, 1, 2048) / GIB, 2), "14.38");
    assert_eq!(r(bytes_per_token(&m, 64, 2048) / GIB, 2), "0.50");
}

#[test]
fn efficiency_table_reads_bounds_and_mbu() {
    let (m, hw, t) = (qwen3_8b(), rtx_pro_6000(), EfficiencyTable::reference());
    let gb: Vec<String> = [1, 4, 16, 64]
        .iter()
        .map(|&b| r(EfficiencyTable::bytes_read(&m, b, 2048) as f64 / GB, 2))
        .collect();
    assert_eq!(gb, ["15.44", "16.34", "19.97", "34.46"]);
    let bound: Vec<String> = [1, 4, 16, 64]
        .iter()
        .map(|&b| {
            r(
                EfficiencyTable::bytes_read(&m, b, 2048) as f64 / hw.mem_bw_bytes_s * 1e3,
                2,
            )
        })
        .collect();
    assert_eq!(bound, ["8.62", "9.12", "11.14", "19.23"]);
    let mbu: Vec<String> = t.mbu(&m, &hw).iter().map(|v| r(v * 100.0, 0)).collect();
    assert_eq!(mbu, ["33", "34", "41", "65"]);
}

#[test]
fn sharing_paging_branches() {
    let m = qwen3_8b();
    let s = shared(&m, KvFormat::Bf16.into(), long(), 6144, 16, 16, KV12);
    assert_eq!(s.shared_bytes as f64 / MIB, 864.0);
    assert_eq!(s.private_tokens, 2304);
    assert_eq!(s.private_bytes as f64 / MIB, 324.0);
    assert_eq!(s.total_bytes as f64 / MIB, 6048.0);
    assert_eq!(r(s.total_bytes as f64 / GIB, 2), "5.91");
    assert_eq!(s.capacity, 35);
    assert_eq!(s.independent_bytes as f64 / MIB, 19_008.0);

    let p4 = paging(&[9, 13, 5, 15], 16, 4, 8, 2).unwrap();
    assert_eq!(
        (
            p4.reserved_slots,
            p4.paged_slots,
            p4.shared_slots,
            p4.stored
        ),
        (64, 52, 44, 42)
    );
    let p2 = paging(&[9, 13, 5, 15], 16, 2, 8, 2).unwrap();
    assert_eq!(
        (p2.paged_slots, p2.shared_slots, p2.table_entries),
        (46, 38, 23)
    );
    let p8 = paging(&[9, 13, 5, 15], 16, 8, 8, 2).unwrap();
    assert_eq!((p8.paged_slots, p8.shared_slots), (56, 48));
    let p16 = paging(&[9, 13, 5, 15], 16, 16, 8, 2).unwrap();
    assert_eq!((p16.shared_blocks, p16.shared_slots), (0, 64));

    let b = branches(95, 4, 9);
    assert_eq!((b.references, b.physical), (416, 131));
    assert_eq!(r(b.saving * 100.0, 0), "69");
}

#[test]
fn adapters_and_companion_kv() {
    let lo = lora(&qwen3_8b(), 16, 100, 8192);
    assert_eq!(r(lo.bytes_per_adapter as f64 / MIB, 1), "14.6");
    assert_eq!(r(lo.total_bytes as f64 / GIB, 2), "1.43");
    assert_eq!(r(lo.contexts_kv_bytes as f64 / GIB, 1), "112.5");
    // 2 × B × S × L × H × M for Llama 2-13B, batch 32, 2048, FP16 ≈ 54 GB.
    let m = llama2_13b();
    assert_eq!(r((32 * 2048 * m.kv_bytes_per_token()) as f64 / GB, 0), "54");
}

#[test]
fn cache_value_of_prefixes() {
    let (m, hw) = (qwen3_8b(), rtx_pro_6000());
    let mfu = EfficiencyTable::reference().prefill_mfu_at(1);
    let a = prefix_value("A", &m, &hw, 6144, 0.5, 64.0 * GB, mfu).unwrap();
    assert_eq!(r(a.bytes as f64 / GB, 3), "0.906");
    assert_eq!(r(a.flops / 1e12, 1), "96.5");
    assert_eq!(r(a.recompute_s * 1e3, 1), "307.9");
    assert_eq!(r(a.fetch_s * 1e3, 1), "14.2");
    assert_eq!(r(a.value_s * 1e3, 1), "132.7");
    assert_eq!(r(a.threshold * 100.0, 1), "4.8");
    let g4 = prefix_value("A4", &m, &hw, 6144, 0.5, 32.0 * GB, mfu).unwrap();
    assert_eq!(r(g4.fetch_s * 1e3, 1), "28.3");
    assert_eq!(r(g4.threshold * 100.0, 1), "10.1");
    let b = prefix_value("B", &m, &hw, 2048, 0.5, 64.0 * GB, mfu).unwrap();
    assert_eq!(b.bytes as f64 / MIB, 288.0);
    assert_eq!(r(b.recompute_s * 1e3, 1), "94.7");
    assert_eq!(r(b.fetch_s * 1e3, 1), "4.7");
    assert_eq!(r(b.value_s * 1e3, 1), "40.3");
    assert_eq!(r(a.value_per_mib_s * 1e3, 3), "0.154");
    assert_eq!(r(b.value_per_mib_s * 1e3, 3), "0.140");
    let c = CacheValue::new(vec![a, b], 0, 1);
    let (_, _, n, three_b, one_a) = c.same_space.unwrap();
    assert_eq!(n, 3);
    assert_eq!(r(three_b * 1e3, 1), "120.9");
    assert!(three_b < one_a);
}

#[test]
fn compression_sizes_and_speed() {
    let m = qwen3_8b();
    let k8 = m.kv_bytes_per_token_in(KvFormat::Q8_0);
    let k4 = m.kv_bytes_per_token_in(KvFormat::Q4_0);
    assert_eq!((8192 * k8) as f64 / MIB, 612.0);
    assert_eq!((8192 * k4) as f64 / MIB, 324.0);
    assert_eq!((8448 * k8) as f64 / MIB, 631.125);
    let batch = 16 * 8448 * k8;
    assert_eq!(r(batch as f64 / GIB, 2), "9.86");
    assert!(batch <= KV12);

    let (hw, t) = (rtx_pro_6000(), EfficiencyTable::reference());
    let eff = hw.mem_bw_bytes_s * t.mbu_at_batch(&m, &hw, 64);
    let s = read_saving(
        &m,
        8192,
        KvFormat::Bf16,
        KvFormat::Q8_0,
        eff,
        &[0.2e-3, 0.8e-3],
    );
    assert_eq!(s.saved_bytes as f64 / MIB, 540.0);
    assert_eq!(r(s.saved_s * 1e3, 3), "0.487");
    assert_eq!(r(s.net[0].1 * 1e3, 3), "0.287");
    assert_eq!(r(s.net[1].1 * 1e3, 3), "-0.313");

    let x = crossover(
        ("BF16", 6.44, 4.37e-5),
        ("FP8", 6.58, 2.37e-5),
        &[2048, 16384],
    );
    assert_eq!(r(x.crossover_tokens, 0), "7000");
    assert_eq!(
        (r(x.samples[0].1, 2), r(x.samples[0].2, 2)),
        ("6.53".into(), "6.63".into())
    );
    assert_eq!(
        (r(x.samples[1].1, 2), r(x.samples[1].2, 2)),
        ("7.16".into(), "6.97".into())
    );

    let u = unified_fit(&qwen3_235b_a22b(), m2_max().memory_bytes, 8 << 30, 8192);
    assert_eq!(r(u.memory_bytes as f64 / GIB, 2), "89.41");
    assert_eq!(r(u.request_bytes as f64 / GIB, 2), "1.47");
    assert_eq!(r(u.files[0].2 / GIB, 2), "1.60");
    assert!(u.files[0].3, "Q2_K leaves room for one 8K request");
    assert!(
        u.files[1].2 < 0.0 && !u.files[1].3,
        "UD-Q2_K_XL does not fit"
    );
}

#[test]
fn weight_offload() {
    let m = qwen3_8b();
    let o = offload(
        &m,
        4,
        &[1, 2],
        (1152 << 20, 1188 << 20),
        0.02626,
        255,
        7.0,
        &[("PCIe Gen5", 64.0 * GB), ("NVLink-C2C", 450.0 * GB)],
        1.0,
    )
    .unwrap();
    assert_eq!(o.layers_offloaded, 9);
    assert_eq!(o.bytes_per_layer as f64 / MIB, 288.0);
    assert_eq!(o.offloaded_bytes as f64 / MIB, 2592.0);
    assert_eq!(o.net[0].1 as f64 / MIB, 2304.0);
    assert_eq!(o.net[1].1 as f64 / MIB, 2016.0);
    assert_eq!(o.extra_states, vec![(1, 2, 1), (2, 1, 1)]);
    assert_eq!(r(o.offloaded_bytes as f64 / GB, 2), "2.72");
    assert_eq!(r(o.links[0].per_step_s * 1e3, 1), "42.5");
    assert_eq!(r(o.links[0].total_s, 1), "10.8");
    assert!(!o.links[0].meets_deadline);
    assert_eq!(r(o.links[1].per_step_s * 1e3, 1), "6.0");
    let ct = compressed_transfer(96 << 20, 0.25, 64.0 * GB).unwrap();
    assert_eq!(r(ct.direct_s * 1e3, 2), "1.57");
    assert_eq!(r(ct.compressed_s * 1e3, 2), "0.39");
    assert_eq!(r(ct.min_decompress_bytes_s / GB, 1), "85.3");
    // Same as B_link / (1 − r).
    assert!((ct.min_decompress_bytes_s - 64.0 * GB / 0.75).abs() < 1.0);
}

#[test]
fn speculative_decoding() {
    let aaaa = spec_row("AAAA", 0.25, 4, 0.02626, 0.1e-3, 0.02626).unwrap();
    let bbbb = spec_row("BBBB", 0.75, 4, 0.02626, 0.1e-3, 0.02626).unwrap();
    assert_eq!(r(aaaa.expected_tokens, 2), "1.33");
    assert_eq!(r(bbbb.expected_tokens, 2), "3.05");
    assert_eq!(r(aaaa.per_token_s * 1e3, 1), "19.8");
    assert_eq!(r(bbbb.per_token_s * 1e3, 2), "8.64");
    assert_eq!(r(aaaa.break_even_draft_s * 1e3, 1), "8.7");
    assert_eq!(r(bbbb.break_even_draft_s * 1e3, 1), "53.9");
    let p = payback(2.0, &bbbb, 256);
    assert_eq!(p.payback_tokens, 114);
    assert_eq!(r(p.plain_total_s, 2), "6.72");

    // The draft-length example: T_m = 26.3 + 3.6m; grouped T_m = 26.3 + 3.6·4·ceil(m/4).
    let seq = draft_length(
        "seq",
        0.75,
        DraftCost::Sequential {
            verify_s: 26.3e-3,
            per_draft_s: 3.6e-3,
        },
        &[1, 2, 4, 8],
        16,
    )
    .unwrap();
    let per: Vec<String> = seq
        .rows
        .iter()
        .map(|r_| r(r_.per_token_s * 1e3, 2))
        .collect();
    assert_eq!(per, ["17.09", "14.49", "13.34", "14.89"]);
    assert_eq!(seq.best_m, 4);
    let grouped = draft_length(
        "grouped",
        0.75,
        DraftCost::Grouped {
            verify_s: 26.3e-3,
            per_draft_s: 3.6e-3,
            group: 4,
        },
        &[4, 5],
        16,
    )
    .unwrap();
    let five = &grouped.rows[1];
    assert_eq!(five.m, 5);
    assert!(
        !five.step_pays,
        "4 → 5 costs a whole group for a^5 more tokens"
    );
    assert_eq!(r(five.marginal_s * 1e3, 1), "60.7");
    assert!(grouped.rows[0].per_token_s < five.per_token_s);
    assert_eq!(grouped.best_m, 4);
    assert_eq!(r(expected_tokens_const(0.75, 8), 2), "3.70");

    let d = draft_sources(
        0.02626,
        3.57e-3,
        4,
        &[("s", false, 3.0), ("p", true, 3.0), ("p2", true, 2.0)],
    );
    let t: Vec<String> = d.rows.iter().map(|x| r(x.3 * 1e3, 1)).collect();
    assert_eq!(t, ["13.5", "9.9", "14.9"]);
    assert_eq!(r(d.rows[0].1 * 1e3, 2), "14.28");
}

fn reference_desk(budget: u64, output: u64) -> folio_plan::desk::Desk {
    let w = DeskWorkload {
        kv_budget_bytes: budget,
        output,
        ..DeskWorkload::reference()
    };
    desk(
        &qwen3_8b(),
        &rtx_pro_6000(),
        &EfficiencyTable::reference(),
        &DeskCalibration::reference(),
        &w,
        &reference_candidates(),
    )
    .unwrap()
}

#[test]
fn design_desk_a_to_e() {
    let d = reference_desk(KV12, 256);
    let row = |n| d.row(n).unwrap();
    let (a, b, c, dd, e) = (row("A"), row("B"), row("C"), row("D"), row("E"));

    assert_eq!(a.kv_bytes as f64 / MIB, 19_008.0);
    assert_eq!(a.verdict, Verdict::Memory);
    assert_eq!(r(a.prefill_flops / 1e12, 1), "2137.5");
    assert_eq!(r(a.prefill_s, 2), "7.34");
    assert_eq!(r(a.round_s * 1e3, 2), "29.63");

    assert_eq!(b.kv_bytes as f64 / MIB, 6048.0);
    assert_eq!(r(b.total_s, 2), "9.01");
    assert_eq!(b.verdict, Verdict::Late);

    assert_eq!(r(c.kv_bytes as f64 / GIB, 2), "9.86");
    assert_eq!(r(c.round_s * 1e3, 2), "28.26");
    assert_eq!(r(c.total_s, 2), "14.55");
    assert_eq!(c.verdict, Verdict::Late);

    assert_eq!(dd.kv_bytes as f64 / MIB, 9236.0);
    assert_eq!(r(dd.kv_bytes as f64 / GIB, 2), "9.02");
    assert_eq!(r(dd.prefill_s, 2), "2.23");
    assert_eq!(dd.rounds, 85);
    assert_eq!(r(dd.verify_s.unwrap() * 1e3, 1), "8.8");
    assert_eq!(r(dd.round_s * 1e3, 2), "27.35");
    assert_eq!(r(dd.total_s, 2), "4.56");
    assert_eq!(dd.verdict, Verdict::Feasible);
    assert_eq!(r(dd.gpu_s_per_good.unwrap(), 3), "0.285");
    assert_eq!(r(dd.energy_j_per_good.unwrap(), 0), "171");

    // Variant E: host-side lookup drafts, 2 tokens/round, 128 rounds of 27.35 + 0.1 ms.
    assert_eq!(e.kv_bytes as f64 / MIB, 6048.0);
    assert_eq!(e.rounds, 128);
    assert_eq!(r(e.round_s * 1e3, 2), "27.45");
    assert_eq!(r(e.total_s, 2), "5.55");
    assert_eq!(e.verdict, Verdict::Feasible);
    assert_eq!(r(e.gpu_s_per_good.unwrap(), 3), "0.347");

    assert_eq!(d.feasible(), ["D", "E"]);
}

#[test]
fn desk_with_6_gib_leaves_none_of_a_to_d() {
    let d = reference_desk(6 << 30, 256);
    let reference: Vec<&str> = d.feasible().into_iter().filter(|n| *n != "E").collect();
    assert!(reference.is_empty(), "{reference:?}");
    assert_eq!(d.row("B").unwrap().verdict, Verdict::Late);
    assert_eq!(d.row("D").unwrap().verdict, Verdict::Memory);
    // The exercise's answer: a drafter without device memory.
    assert_eq!(d.feasible(), ["E"]);
}

#[test]
fn desk_with_16_output_tokens() {
    let d = reference_desk(KV12, 16);
    assert_eq!(r(d.row("B").unwrap().total_s, 2), "2.45");
    assert_eq!(r(d.row("D").unwrap().total_s, 2), "2.37");
    assert_eq!(d.row("D").unwrap().rounds, 5);
    assert!(d.feasible().contains(&"B") && d.feasible().contains(&"D"));
}

#[test]
fn serving_figures() {
    let s = serving::reference();
    assert_eq!(s.little[0].2, 2.0);
    assert_eq!(s.little[1].2, 8.0);
    assert_eq!(r(s.request.4, 2), "6.95");
    assert_eq!(r(s.request.5, 2), "7.05");
    assert_eq!(r(s.throughput[0].2, 0), "583");
    assert_eq!(r(s.throughput[1].2, 0), "38");
    assert_eq!(r(s.amdahl[0].3, 1), "62.5");
    assert_eq!(r(s.amdahl[0].2, 1), "1.6");
    assert_eq!(r(s.amdahl[1].3, 0), "85");
    assert_eq!(r(s.gpu_s.4, 3), "0.563");
    assert_eq!(r(s.cost.2, 2), "5.56");
    assert_eq!(r(s.mbu.4 * 100.0, 0), "70");
    assert_eq!(r(serving::goodput(155, 155.0 / 0.9), 2), "0.90");
}
