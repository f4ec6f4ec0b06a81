//! `folio bench plot`: SVG line charts from result files, one series per file (server), so
//! two servers can be compared on one chart. Written by hand: a chart is a few dozen SVG
//! elements and needs no plotting crate.

use crate::error::{BenchError, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::report::{ResultFile, RunReport};
use crate::stats::Summary;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
    /// Index into the palette (same file = same color).
    pub color: usize,
}

/// A chart with linear axes starting at 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const PALETTE: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// A "nice" tick step (1, 2 or 5 × 10^k) giving about `n` ticks up to `max`.
pub fn nice_step(max: f64, n: usize) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let raw = max / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

impl Chart {
    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let (w, h) = (880.0, 460.0);
        let (l, r, t, b) = (80.0, 350.0, 50.0, 60.0);
        let pw = w - l - r;
        let ph = h - t - b;
        let pts = self.series.iter().flat_map(|s| s.points.iter());
        let xmax = pts.clone().map(|p| p.0).fold(0.0f64, f64::max);
        let ymax = pts.map(|p| p.1).fold(0.0f64, f64::max);
        let xs = nice_step(xmax, 6);
        let ys = nice_step(ymax, 6);
        let xtop = ((xmax / xs).ceil() * xs).max(xs);
        let ytop = ((ymax / ys).ceil() * ys).max(ys);
        let px = |x: f64| l + x / xtop * pw;
        let py = |y: f64| t + ph - y / ytop * ph;
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Arial, Helvetica, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="28" text-anchor="middle" font-size="16">{}</text>
"#,
            l + pw / 2.0,
            esc(&self.title)
        );
        let mut x = 0.0;
        while x <= xtop + xs * 1e-9 {
            let _ = writeln!(
                s,
                r##"<line x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2}" stroke="#ddd"/><text x="{0:.1}" y="{3}" text-anchor="middle">{4}</text>"##,
                px(x),
                t,
                t + ph,
                t + ph + 18.0,
                fmt_tick(x)
            );
            x += xs;
        }
        let mut y = 0.0;
        while y <= ytop + ys * 1e-9 {
            let _ = writeln!(
                s,
                r##"<line x1="{0}" y1="{1:.1}" x2="{2}" y2="{1:.1}" stroke="#ddd"/><text x="{3}" y="{4:.1}" text-anchor="end">{5}</text>"##,
                l,
                py(y),
                l + pw,
                l - 6.0,
                py(y) + 4.0,
                fmt_tick(y)
            );
            y += ys;
        }
        let _ = writeln!(
            s,
            r#"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">{}</text>
<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">{}</text>"#,
            l + pw / 2.0,
            h - 15.0,
            esc(&self.x_label),
            t + ph / 2.0,
            t + ph / 2.0,
            esc(&self.y_label)
        );
        for (i, ser) in self.series.iter().enumerate() {
            let color = PALETTE[ser.color % PALETTE.len()];
            let dash = if ser.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let mut pts = ser.points.clone();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let path: Vec<String> = pts
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
                path.join(" ")
            );
            for (x, y) in &pts {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                    px(*x),
                    py(*y)
                );
            }
            let ly = t + 10.0 + i as f64 * 20.0;
            let lx = l + pw + 15.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
                lx + 28.0,
                lx + 34.0,
                ly + 4.0,
                esc(&ser.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

type Pick = fn(&RunReport) -> Option<f64>;
type PickSummary = fn(&RunReport) -> Option<Summary>;

fn rate_series(files: &[ResultFile], name: &str, pick: Pick, dashed: bool) -> Vec<Series> {
    files
        .iter()
        .enumerate()
        .map(|(i, f)| Series {
            name: format!("{} {name}", f.label),
            points: f
                .runs
                .iter()
                .filter_map(|r| Some((r.setup.request_rate?, pick(r)?)))
                .collect(),
            dashed,
            color: i,
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// Concurrency of a closed-loop run: its cap, or all requests when they arrive at once.
fn concurrency(r: &RunReport) -> Option<f64> {
    r.setup
        .max_concurrency
        .or((r.setup.request_rate.is_none()).then_some(r.setup.num_requests))
        .map(|c| c as f64)
}

/// The charts for `files`: latency percentiles, goodput and throughput versus request rate,
/// and throughput versus concurrency (charts without data are left out).
pub fn charts(files: &[ResultFile]) -> Vec<(String, Chart)> {
    let mut out = Vec::new();
    let lat: [(&str, &str, PickSummary); 4] = [
        ("ttft", "TTFT", |r| r.ttft_ms),
        ("tpot", "TPOT", |r| r.tpot_ms),
        ("itl", "ITL", |r| r.itl_ms),
        ("e2e", "E2E latency", |r| r.e2e_ms),
    ];
    for (file, title, get) in lat {
        let mut series = Vec::new();
        for (i, f) in files.iter().enumerate() {
            for (q, dashed, pick) in [
                ("p50", false, (|s: Summary| s.p50) as fn(Summary) -> f64),
                ("p99", true, |s: Summary| s.p99),
            ] {
                let points: Vec<(f64, f64)> = f
                    .runs
                    .iter()
                    .filter_map(|r| Some((r.setup.request_rate?, pick(get(r)?))))
                    .collect();
                if !points.is_empty() {
                    series.push(Series {
                        name: format!("{} {q}", f.label),
                        points,
                        dashed,
                        color: i,
                    });
                }
            }
        }
        if !series.is_empty() {
            out.push((
                format!("{file}_vs_rate.svg"),
                Chart {
                    title: format!("{title} (p50 solid, p99 dashed) vs request rate"),
                    x_label: "request rate (req/s)".into(),
                    y_label: format!("{title} (ms)"),
                    series,
                },
            ));
        }
    }
    let mut good = rate_series(files, "goodput", |r| Some(r.goodput_rps), false);
    good.extend(rate_series(
        files,
        "completed",
        |r| Some(r.request_throughput),
        true,
    ));
    if !good.is_empty() {
        out.push((
            "goodput_vs_rate.svg".into(),
            Chart {
                title: "Goodput (solid) and completion throughput (dashed) vs request rate".into(),
                x_label: "request rate (req/s)".into(),
                y_label: "requests/s".into(),
                series: good,
            },
        ));
    }
    let tput = rate_series(files, "output tok/s", |r| Some(r.output_throughput), false);
    if !tput.is_empty() {
        out.push((
            "throughput_vs_rate.svg".into(),
            Chart {
                title: "Output throughput vs request rate".into(),
                x_label: "request rate (req/s)".into(),
                y_label: "output tokens/s".into(),
                series: tput,
            },
        ));
    }
    let conc: Vec<Series> = files
        .iter()
        .enumerate()
        .map(|(i, f)| Series {
            name: format!("{} output tok/s", f.label),
            points: f
                .runs
                .iter()
                .filter_map(|r| Some((concurrency(r)?, r.output_throughput)))
                .collect(),
            dashed: false,
            color: i,
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if !conc.is_empty() {
        out.push((
            "throughput_vs_concurrency.svg".into(),
            Chart {
                title: "Output throughput vs concurrency (batch)".into(),
                x_label: "concurrent requests".into(),
                y_label: "output tokens/s".into(),
                series: conc,
            },
        ));
    }
    out
}

/// Reads result files (a [`ResultFile`] or a bare [`RunReport`] each). Files that share a
/// label get their file name appended, so every series stays distinguishable.
pub fn load(paths: &[PathBuf]) -> Result<Vec<ResultFile>> {
    let mut files = read_all(paths)?;
    let labels: Vec<String> = files.iter().map(|f| f.label.clone()).collect();
    for (f, p) in files.iter_mut().zip(paths) {
        if labels.iter().filter(|l| **l == f.label).count() > 1 {
            let stem = p
                .file_stem()
                .map_or(String::new(), |s| s.to_string_lossy().into_owned());
            f.label = format!("{} ({stem})", f.label);
        }
    }
    Ok(files)
}

fn read_all(paths: &[PathBuf]) -> Result<Vec<ResultFile>> {
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p)
                .map_err(BenchError::during(format!("reading {}", p.display())))?;
            if let Ok(f) = serde_json::from_str::<ResultFile>(&text) {
                return Ok(f);
            }
            let run: RunReport = serde_json::from_str(&text).map_err(BenchError::during(
                format!("{} is not a folio bench result file", p.display()),
            ))?;
            Ok(ResultFile {
                label: p
                    .file_stem()
                    .map_or("run".into(), |s| s.to_string_lossy().into_owned()),
                base_url: String::new(),
                model: String::new(),
                runs: vec![run],
            })
        })
        .collect()
}

/// Whether the JSON text is a `folio bench quality` result file.
fn is_quality(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text)
        .is_ok_and(|v| v["kind"] == "quality" && v["configs"].is_array())
}

/// Writes the charts of every result file in `paths` into `dir`: the quality grid
/// (`quality_grid.svg`, or `quality_grid_<file>.svg` for several) of each quality file,
/// and the serve charts of the others ([`load`], [`write_all`]). Returns the paths written.
pub fn write_paths(paths: &[PathBuf], dir: &Path, png: bool) -> Result<Vec<PathBuf>> {
    let mut quality = Vec::new();
    let mut serve = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p)
            .map_err(BenchError::during(format!("reading {}", p.display())))?;
        if is_quality(&text) {
            let mut f: crate::quality::QualityFile = serde_json::from_str(&text).map_err(
                BenchError::during(format!("{} is not a quality result file", p.display())),
            )?;
            f.finish();
            quality.push((p, f));
        } else {
            serve.push(p.clone());
        }
    }
    let mut written = Vec::new();
    if !quality.is_empty() {
        std::fs::create_dir_all(dir)
            .map_err(BenchError::during(format!("creating {}", dir.display())))?;
    }
    let several = quality.len() > 1;
    for (p, f) in &quality {
        let name = match (several, p.file_stem()) {
            (true, Some(stem)) => format!("quality_grid_{}.svg", stem.to_string_lossy()),
            _ => "quality_grid.svg".into(),
        };
        write_chart(
            &dir.join(name),
            &crate::quality::svg::grid_svg(f),
            png,
            &mut written,
        )?;
    }
    if !serve.is_empty() {
        written.extend(write_all(&load(&serve)?, dir, png)?);
    }
    Ok(written)
}

/// Writes every chart of `files` into `dir`; returns the paths written. When `png` is set
/// and `resvg`, `rsvg-convert` or ImageMagick's `convert` is installed, a PNG is written
/// beside each SVG (best effort).
pub fn write_all(files: &[ResultFile], dir: &Path, png: bool) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(BenchError::during(format!("creating {}", dir.display())))?;
    let mut written = Vec::new();
    for (name, chart) in charts(files) {
        write_chart(&dir.join(&name), &chart.svg(), png, &mut written)?;
    }
    Ok(written)
}

/// Writes one SVG (and a PNG beside it when `png` and a rasterizer is installed), adding
/// the paths written to `written`.
fn write_chart(path: &Path, svg: &str, png: bool, written: &mut Vec<PathBuf>) -> Result<()> {
    std::fs::write(path, svg).map_err(BenchError::during(format!("writing {}", path.display())))?;
    written.push(path.to_path_buf());
    if png {
        let out = path.with_extension("png");
        if to_png(path, &out) {
            written.push(out);
        }
    }
    Ok(())
}

/// Converts with the first SVG rasterizer found on PATH; false when none worked.
fn to_png(svg: &Path, png: &Path) -> bool {
    use std::process::{Command, Stdio};
    let tries: [(&str, Vec<&std::ffi::OsStr>); 3] = [
        ("resvg", vec![svg.as_os_str(), png.as_os_str()]),
        (
            "rsvg-convert",
            vec!["-o".as_ref(), png.as_os_str(), svg.as_os_str()],
        ),
        ("convert", vec![svg.as_os_str(), png.as_os_str()]),
    ];
    tries.iter().any(|(cmd, args)| {
        Command::new(cmd)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            && png.is_file()
    })
}
