//! `/metrics` of a server with several models: each loaded model renders its own page
//! (the single-model page, unchanged), and the pages are joined family by family, every
//! sample labelled `model_name="…"` as vLLM labels its families. A family keeps one
//! `# HELP`/`# TYPE` header (Prometheus refuses a second); the server-wide families
//! (`metrics::SERVER_WIDE`) appear once, unlabelled. An unloaded model has no page, so
//! its KV blocks and request figures leave the page with it.

use crate::histogram::escape;

/// One family: its header lines and samples, in first-seen order.
struct Family {
    name: String,
    header: Vec<String>,
    samples: Vec<String>,
}

/// Joins `pages` (model name, page text) into one page. `server_wide`: families kept
/// from the first page only, without a model label.
pub fn join(pages: &[(String, String)], server_wide: &[&str]) -> String {
    let mut families: Vec<Family> = Vec::new();
    for (k, (model, page)) in pages.iter().enumerate() {
        let label = format!("model_name=\"{}\"", escape(model));
        let mut current: Option<usize> = None;
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap_or("").to_string();
                let i = match families.iter().position(|f| f.name == name) {
                    Some(i) => i,
                    None => {
                        families.push(Family {
                            name,
                            header: vec![line.to_string()],
                            samples: Vec::new(),
                        });
                        families.len() - 1
                    }
                };
                current = Some(i);
                continue;
            }
            let Some(i) = current else { continue };
            let f = &mut families[i];
            if line.starts_with("# ") {
                if !f.header.iter().any(|h| h == line) {
                    f.header.push(line.to_string());
                }
                continue;
            }
            if line.is_empty() {
                continue;
            }
            if server_wide.contains(&f.name.as_str()) {
                if k == 0 {
                    f.samples.push(line.to_string());
                }
                continue;
            }
            f.samples.push(labelled(line, &label));
        }
    }
    let mut out = String::with_capacity(pages.iter().map(|(_, p)| p.len()).sum());
    for f in families {
        for h in f.header {
            out.push_str(&h);
            out.push('\n');
        }
        for s in f.samples {
            out.push_str(&s);
            out.push('\n');
        }
    }
    out
}

/// `sample` with `label` added unless it already carries a `model_name`.
fn labelled(sample: &str, label: &str) -> String {
    if sample.contains("model_name=\"") {
        return sample.to_string();
    }
    match (sample.find('{'), sample.find(' ')) {
        (Some(b), Some(sp)) if b < sp => {
            let (name, rest) = sample.split_at(b + 1);
            if rest.starts_with('}') {
                format!("{name}{label}{rest}")
            } else {
                format!("{name}{label},{rest}")
            }
        }
        (_, Some(sp)) => {
            let (name, rest) = sample.split_at(sp);
            format!("{name}{{{label}}}{rest}")
        }
        _ => sample.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_families_and_labels_samples() {
        let a = "# HELP folio_kv_blocks_used Blocks.\n# TYPE folio_kv_blocks_used gauge\nfolio_kv_blocks_used 2.0\n# HELP folio_http_rejected_total R.\n# TYPE folio_http_rejected_total counter\nfolio_http_rejected_total{status=\"429\"} 1\n# HELP vllm:x X.\n# TYPE vllm:x gauge\nvllm:x{model_name=\"a\"} 1.0\n# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 3\n";
        let b = a
            .replace("model_name=\"a\"", "model_name=\"b\"")
            .replace("2.0", "5.0");
        let page = join(
            &[("a".into(), a.into()), ("b".into(), b)],
            &["folio_http_rejected_total"],
        );
        assert_eq!(
            page,
            "# HELP folio_kv_blocks_used Blocks.\n# TYPE folio_kv_blocks_used gauge\n\
             folio_kv_blocks_used{model_name=\"a\"} 2.0\nfolio_kv_blocks_used{model_name=\"b\"} 5.0\n\
             # HELP folio_http_rejected_total R.\n# TYPE folio_http_rejected_total counter\n\
             folio_http_rejected_total{status=\"429\"} 1\n\
             # HELP vllm:x X.\n# TYPE vllm:x gauge\nvllm:x{model_name=\"a\"} 1.0\nvllm:x{model_name=\"b\"} 1.0\n\
             # HELP h H.\n# TYPE h histogram\nh_bucket{model_name=\"a\",le=\"1\"} 3\nh_bucket{model_name=\"b\",le=\"1\"} 3\n"
        );
    }
}
