//! Issue 8, acceptance 2: the r0–r3 preset through folio-core's scheduler, within 2%.

use folio_plan::schedule::{reference_modes, reference_workload, schedule, WorkItem};
use folio_plan::{run_section, PlanInput, Section};

fn within(got: f64, want: f64) -> bool {
    ((got - want) / want).abs() <= 0.02
}

#[test]
fn reference_preset_reproduces_the_example() {
    let s = schedule(
        &reference_workload(),
        &reference_modes(),
        2,
        &folio_core::CostModel::REFERENCE,
        4096,
        16,
    )
    .unwrap();
    for (mode, total, itl) in [
        ("fixed", 0.870, 0.026),
        ("continuous", 0.766, 0.376),
        ("chunked", 0.844, 0.133),
    ] {
        let m = s.mode(mode).unwrap();
        assert!(within(m.makespan_s, total), "{mode} total {}", m.makespan_s);
        assert!(within(m.max_itl_s, itl), "{mode} max ITL {}", m.max_itl_s);
        assert_eq!(m.requests.len(), 4);
        assert!(m.requests.iter().all(|r| r.e2e_s.is_some() && !r.rejected));
    }
    // Continuous batching's single worst stall is ~14× a decode round.
    let c = s.mode("continuous").unwrap();
    assert_eq!((c.max_itl_s / 0.02626).round(), 14.0);
}

#[test]
fn the_section_uses_the_preset_by_default() {
    let out = run_section(Section::Schedule, &PlanInput::reference()).unwrap();
    let text = out.tables[0].to_string();
    assert!(
        text.contains("870.5") && text.contains("765.6") && text.contains("844.3"),
        "{text}"
    );
    assert_eq!(out.data["results"][2]["mode"]["name"], "chunked");
}

#[test]
fn user_workload_and_budget() {
    let mut p = PlanInput::reference();
    p.requests = vec![
        WorkItem::parse("0:1024:4").unwrap(),
        WorkItem::parse("10:4096:4").unwrap(),
    ];
    p.token_budget = Some(512);
    p.max_chunk = Some(512);
    let out = run_section(Section::Schedule, &p).unwrap();
    let user = out.data["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mode"]["name"] == "user")
        .unwrap();
    // 1024 + 4096 prompt tokens at ≤ 512 per round need at least 10 rounds.
    assert!(user["rounds"].as_u64().unwrap() >= 10);
    assert!(WorkItem::parse("0:10").is_err());
    let e = WorkItem::parse("0:abc:4").unwrap_err().to_string();
    assert!(e.contains("0:abc:4") && e.contains("input"), "{e}");
}
