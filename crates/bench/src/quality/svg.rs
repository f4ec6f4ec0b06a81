//! The quality grid as an SVG (`folio bench plot QUALITY.json`): a row per task, per
//! configuration a column per (concurrency, run); green right, red wrong, amber right only
//! at a retry; a black frame and `*` mark cells that differ from the baseline.

use std::fmt::Write as _;

use super::grid::QualityFile;

const RIGHT: &str = "#2ca02c";
const WRONG: &str = "#d62728";
const RETRY: &str = "#ff7f0e";
const MISSING: &str = "#dddddd";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The grid chart of `f` (call [`QualityFile::finish`] first for the marks and totals).
pub fn grid_svg(f: &QualityFile) -> String {
    let cols: Vec<(usize, usize)> = f
        .concurrency
        .iter()
        .flat_map(|&c| (1..=f.runs).map(move |r| (c, r)))
        .collect();
    let (cw, ch, gap) = (30.0, 20.0, 24.0);
    let (left, top) = (150.0, 90.0);
    let group_w = cols.len() as f64 * cw;
    let group_span = group_w.max(110.0) + gap;
    let w = left + f.configs.len() as f64 * group_span + 20.0;
    let rows = f.tasks.len() as f64;
    let h = top + rows * ch + 100.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Arial, Helvetica, sans-serif" font-size="11">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>
"#,
        w / 2.0,
        esc(&format!(
            "Quality grid: {} ({} records, {} runs, retries {})",
            f.model,
            f.records
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("/"),
            f.runs,
            f.retries
        ))
    );
    for (i, t) in f.tasks.iter().enumerate() {
        let y = top + i as f64 * ch + ch * 0.7;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{y:.1}" text-anchor="end">{} (key {})</text>"#,
            left - 8.0,
            esc(&t.id),
            t.key
        );
    }
    for (g, cfg) in f.configs.iter().enumerate() {
        let x0 = left + g as f64 * group_span;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle" font-size="13">{}</text>"#,
            x0 + group_w / 2.0,
            top - 34.0,
            esc(&cfg.label)
        );
        for (j, (c, r)) in cols.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{}" text-anchor="middle" font-size="9">c{c}.{r}</text>"#,
                x0 + j as f64 * cw + cw / 2.0,
                top - 8.0
            );
        }
        for (i, t) in f.tasks.iter().enumerate() {
            for (j, &(c, r)) in cols.iter().enumerate() {
                let cell = QualityFile::cell(cfg, &t.id, c, r);
                let fill = match cell {
                    None => MISSING,
                    Some(c) if c.first_correct() => RIGHT,
                    Some(c) if c.correct() => RETRY,
                    Some(_) => WRONG,
                };
                let differs = cell.is_some_and(|c| c.differs_from_baseline);
                let (x, y) = (x0 + j as f64 * cw, top + i as f64 * ch);
                let stroke = if differs {
                    r##" stroke="black" stroke-width="2.5""##
                } else {
                    r##" stroke="white" stroke-width="1""##
                };
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{fill}"{stroke}/>"#,
                    x + 1.5,
                    y + 1.5,
                    cw - 3.0,
                    ch - 3.0
                );
                if differs {
                    let _ = writeln!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="white" font-size="13">*</text>"#,
                        x + cw / 2.0,
                        y + ch * 0.8
                    );
                }
            }
        }
        let tt = &cfg.totals;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}/{} right ({} differ)</text>"#,
            x0 + group_w / 2.0,
            top + rows * ch + 18.0,
            tt.correct,
            tt.cells,
            tt.differ_from_baseline
        );
    }
    let ly = top + rows * ch + 50.0;
    let mut lx = left;
    for (color, name) in [
        (RIGHT, "right"),
        (WRONG, "wrong"),
        (RETRY, "right at a retry"),
    ] {
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{ly}" width="14" height="14" fill="{color}"/><text x="{}" y="{}">{name}</text>"#,
            lx + 19.0,
            ly + 11.0
        );
        lx += 130.0;
    }
    let _ = writeln!(
        s,
        r#"<rect x="{lx}" y="{ly}" width="14" height="14" fill="{MISSING}" stroke="black" stroke-width="2.5"/><text x="{}" y="{}">* differs from {}</text>"#,
        lx + 19.0,
        ly + 11.0,
        esc(&f.baseline)
    );
    s.push_str("</svg>\n");
    s
}
