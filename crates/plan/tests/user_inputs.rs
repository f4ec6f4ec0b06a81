//! Sections for a user's own model, hardware and workload; errors name the field.

use folio_plan::desk::Verdict;
use folio_plan::{
    render, render_json, run_all, run_section, HardwareProfile, KvFormat, ModelProfile, PlanInput,
    Section,
};

#[test]
fn reference_plan_renders_every_section_with_explanations() {
    let outs = run_all(&PlanInput::reference()).unwrap();
    let names: Vec<&str> = outs.iter().map(|o| o.section.name()).collect();
    assert_eq!(
        names,
        [
            "capacity", "roofline", "schedule", "cache", "compress", "offload", "spec", "desk",
            "serving"
        ]
    );
    for o in &outs {
        for t in &o.tables {
            assert!(
                !t.explanation.is_empty(),
                "{} / {} lacks its formula line",
                o.section.name(),
                t.title
            );
        }
    }
    let text = render(&outs);
    assert!(text.contains("== desk ==") && text.contains("feasible"));
    let j = render_json(&outs);
    assert_eq!(j["capacity"]["capacity"]["bytes_per_token"], 147_456);
    assert_eq!(j["desk"]["rows"][3]["verdict"], "feasible");
}

#[test]
fn other_model_and_hardware_run_every_section() {
    let mut p = PlanInput::reference();
    p.model = ModelProfile::resolve("llama-3.1-8b").unwrap();
    p.hardware = HardwareProfile::resolve("h100").unwrap();
    let outs = run_all(&p).unwrap();
    assert_eq!(outs.len(), 9);
    let j = render_json(&outs);
    // Llama-3.1-8B: 2 × 32 × 8 × 128 × 2 = 131,072 B per token.
    assert_eq!(j["capacity"]["capacity"]["bytes_per_token"], 131_072);
    // No measured rounds for this pair: the roofline shows bounds only.
    assert!(j["roofline"]["rows"][0]["measured_s"].is_null());
}

#[test]
fn desk_for_a_user_workload() {
    let mut p = PlanInput::reference();
    p.output_tokens = Some(64);
    p.deadline_s = Some(30.0);
    p.kv_budget_bytes = Some(40 << 30);
    let out = run_section(Section::Desk, &p).unwrap();
    let rows = out.data["rows"].as_array().unwrap();
    // Everything fits 40 GiB and finishes in 30 s.
    assert!(rows
        .iter()
        .all(|r| r["verdict"] == serde_json::json!(Verdict::Feasible)));
}

#[test]
fn kv_format_flag_changes_capacity() {
    let mut p = PlanInput::reference();
    p.kv_format = Some(KvFormat::Q8_0.into());
    let out = run_section(Section::Capacity, &p).unwrap();
    assert_eq!(out.data["capacity"]["bytes_per_token"], 78_336);
    // K and V apart: Qwen3-8B's 36 layers × 8 KV heads, K rows of 136 B (q8_0), V of 72 (q4h).
    p.kv_format = Some(folio_plan::KvFormats {
        k: KvFormat::Q8_0,
        v: KvFormat::Q4h,
    });
    p.context = Some(8192);
    let out = run_section(Section::Capacity, &p).unwrap();
    let cap = &out.data["capacity"];
    assert_eq!(
        (
            &cap["k_bytes_per_token"],
            &cap["v_bytes_per_token"],
            &cap["bytes_per_token"]
        ),
        (
            &serde_json::json!(39_168),
            &serde_json::json!(20_736),
            &serde_json::json!(59_904)
        )
    );
    // 12 GiB / (16 · 59,904) = 13,443 blocks; an 8K request holds 512: 26 fit.
    let fit = out.data["kv_fit"]["rows"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (&fit["pool_blocks"], &fit["requests"]),
        (&serde_json::json!(13_443), &serde_json::json!(26))
    );
}

#[test]
fn json_model_profile_and_errors() {
    let dir = std::env::temp_dir().join(format!("folio-plan-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("m.json");
    std::fs::write(
        &good,
        r#"{"name":"tiny","layers":2,"hidden":64,"heads":4,"kv_heads":2,"head_dim":16,"ffn":128,"vocab":100}"#,
    )
    .unwrap();
    let m = ModelProfile::resolve(good.to_str().unwrap()).unwrap();
    assert_eq!(m.kv_bytes_per_token(), 2 * 2 * 2 * 16 * 2);
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"name":"bad","layers":0,"hidden":64,"heads":4,"kv_heads":2,"head_dim":16,"ffn":128,"vocab":100}"#,
    )
    .unwrap();
    let e = ModelProfile::resolve(bad.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("layers") && e.contains('0'), "{e}");
    std::fs::remove_dir_all(&dir).ok();

    assert!(Section::parse("kv").is_ok());
    assert!(Section::parse("bogus")
        .unwrap_err()
        .to_string()
        .contains("bogus"));
    let mut p = PlanInput::reference();
    p.hit_rate = 1.5;
    let e = run_section(Section::Cache, &p).unwrap_err().to_string();
    assert!(e.contains("hit rate") && e.contains("1.5"), "{e}");
}
