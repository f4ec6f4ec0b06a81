//! Issue 8, acceptance 3 (code path): a machine profile JSON → predicted decode round time and
//! KV capacity for SmolLM2-135M. The real comparison needs `folio profile`'s file.

use folio_plan::capacity::Shape;
use folio_plan::machine::predict;
use folio_plan::model::smollm2_135m;
use folio_plan::{run_section, HardwareProfile, MachineProfile, PlanInput, Section};

const PROFILE: &str = r#"{
  "name": "test box",
  "mem_bw_bytes_s": 2.0e10,
  "peak_flops": 2.0e11,
  "memory_bytes": 25769803776,
  "mbu": 0.5,
  "mfu": 0.25,
  "round_overhead_s": 0.001,
  "decode_fit": {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "fixed_s": 0.010, "per_token_s": 0.0002, "per_pair_s": 1e-9}
}"#;

#[test]
fn prediction_from_a_hand_made_profile() {
    let m = MachineProfile::from_json_str(PROFILE, "inline").unwrap();
    let model = smollm2_135m();
    let shape = Shape {
        input: 256,
        output: 128,
    };
    let p = predict(&model, &m, 4, 256, 1 << 30, 16, shape).unwrap();
    // Bytes: whole Q4_1 file + 4 × 256 × 23,040 B of f16 KV.
    assert_eq!(p.bytes_read, 98_362_432 + 4 * 256 * 23_040);
    let read = p.bytes_read as f64 / 2.0e10;
    assert!((p.read_bound_s - read).abs() < 1e-15);
    let flops = 4.0 * model.decode_flops(256);
    assert!((p.compute_bound_s - flops / 2.0e11).abs() < 1e-15);
    let want = (read / 0.5).max(flops / 2.0e11 / 0.25) + 0.001;
    assert!(
        (p.predicted_round_s - want).abs() < 1e-15,
        "{}",
        p.predicted_round_s
    );
    // The fit names this model's file, so it is evaluated: 4 decode rows at h = 256.
    let fit = 0.010 + 4.0 * (0.0002 + 1e-9 * 257.0);
    assert!((p.fit_round_s.unwrap() - fit).abs() < 1e-12);
    // 1 GiB / (16 × 23,040 B) = 2912 blocks; a request ends at 256 + 127 → 384 tokens = 24 blocks.
    assert_eq!(p.capacity_blocks, 2912);
    assert_eq!(p.capacity_tokens, 46_592);
    assert_eq!(p.capacity_requests, 121);
}

#[test]
fn machine_section_loads_the_file() {
    let dir = std::env::temp_dir().join(format!("folio-plan-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("machine.json");
    std::fs::write(&path, PROFILE).unwrap();
    let path = path.to_str().unwrap();
    let mut p = PlanInput::reference();
    p.model = smollm2_135m();
    p.machine = Some(MachineProfile::from_json_file(path).unwrap());
    p.hardware = HardwareProfile::resolve(path).unwrap();
    assert_eq!(p.hardware.name, "test box");
    let out = run_section(Section::Machine, &p).unwrap();
    assert_eq!(out.data["capacity_blocks"], 2912);
    assert!(out.tables[0].to_string().contains("predicted round ms"));
    // Without a profile the section says what it needs.
    let e = run_section(Section::Machine, &PlanInput::reference())
        .unwrap_err()
        .to_string();
    assert!(e.contains("folio profile"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn fit_for_another_model_is_not_used() {
    let mut m = MachineProfile::from_json_str(PROFILE, "inline").unwrap();
    m.decode_fit.as_mut().unwrap().model = Some("Qwen3-8B".into());
    let p = predict(
        &smollm2_135m(),
        &m,
        1,
        256,
        1 << 30,
        16,
        Shape {
            input: 256,
            output: 128,
        },
    )
    .unwrap();
    assert_eq!(p.fit_round_s, None);
}

#[test]
fn schedule_on_a_measured_machine_uses_its_fit() {
    let mut p = PlanInput::reference();
    p.model = smollm2_135m();
    let m = MachineProfile::from_json_str(PROFILE, "inline").unwrap();
    p.hardware = m.hardware();
    p.machine = Some(m);
    let c = p.cost_model();
    assert_eq!(
        (c.fixed_s, c.per_token_s, c.per_pair_s),
        (0.010, 0.0002, 1e-9)
    );
    let out = run_section(Section::Schedule, &p).unwrap();
    assert_eq!(out.data["fixed_s"], 0.010);
}
