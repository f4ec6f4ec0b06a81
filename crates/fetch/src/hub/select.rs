//! Which GGUF of a repository a quant names: file names grouped into models (a split
//! GGUF's `-00001-of-00003.gguf` parts are one), then the exact quant, else the closest
//! by [`PREFERENCE`].

/// The quant taken when none is asked for.
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// Quants from most to least preferred; "closest" is the nearest position in this list.
pub const PREFERENCE: &[&str] = &[
    "Q4_K_M", "Q4_K_S", "Q4_0", "Q4_1", "IQ4_XS", "IQ4_NL", "Q5_K_M", "Q5_K_S", "Q5_0", "Q5_1",
    "Q3_K_L", "Q3_K_M", "Q6_K", "Q3_K_S", "Q8_0", "IQ3_M", "IQ3_S", "IQ3_XS", "IQ3_XXS", "Q2_K",
    "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "BF16", "F16", "F32",
];

/// One model file in a repository: a single GGUF, or a split GGUF's parts in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub files: Vec<String>,
}

impl Candidate {
    pub fn is_split(&self) -> bool {
        self.files.len() > 1
    }
    fn name(&self) -> &str {
        &self.files[0]
    }
}

/// `(prefix, index, count)` of a split part's name `prefix-00001-of-00003.gguf`.
pub fn split_part(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, index) = rest.rsplit_once('-')?;
    if count.len() != 5 || index.len() != 5 {
        return None;
    }
    Some((prefix, index.parse().ok()?, count.parse().ok()?))
}

/// The repository's GGUF models (projectors, `mmproj-*`, left out), split parts grouped
/// (a split whose parts are not all listed is left out).
pub fn candidates(files: &[String]) -> Vec<Candidate> {
    let mut singles = Vec::new();
    let mut splits: std::collections::BTreeMap<(String, u32), Vec<(u32, String)>> =
        Default::default();
    for f in files {
        let base = f.rsplit('/').next().unwrap_or(f);
        if !f.ends_with(".gguf") || base.to_ascii_lowercase().contains("mmproj") {
            continue;
        }
        match split_part(f) {
            Some((prefix, i, n)) => splits
                .entry((prefix.to_string(), n))
                .or_default()
                .push((i, f.clone())),
            None => singles.push(Candidate {
                files: vec![f.clone()],
            }),
        }
    }
    for ((_, n), mut parts) in splits {
        parts.sort();
        parts.dedup_by_key(|p| p.0);
        if parts.len() == n as usize && parts.iter().enumerate().all(|(i, p)| p.0 == i as u32 + 1) {
            singles.push(Candidate {
                files: parts.into_iter().map(|p| p.1).collect(),
            });
        }
    }
    singles.sort_by(|a, b| a.files.cmp(&b.files));
    singles
}

/// Whether `name` carries `quant` as a token (case-insensitive, not part of a longer
/// quant: `Q4_K` is not in `Q4_K_M`).
pub fn has_quant(name: &str, quant: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name).to_ascii_uppercase();
    let q = quant.to_ascii_uppercase();
    let bytes = base.as_bytes();
    let mut from = 0;
    while let Some(i) = base[from..].find(&q) {
        let start = from + i;
        let end = start + q.len();
        let before_ok = start == 0 || !bytes[start - 1].is_ascii_alphanumeric();
        let after_ok =
            end >= bytes.len() || !(bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_');
        if before_ok && after_ok {
            return true;
        }
        from = start + 1;
    }
    false
}

/// The quant of [`PREFERENCE`] `name` carries.
pub fn quant_of(name: &str) -> Option<&'static str> {
    PREFERENCE.iter().copied().find(|q| has_quant(name, q))
}

/// The candidate for `quant`: one carrying it exactly, else the one whose quant is nearest
/// in [`PREFERENCE`] (ties to the more preferred), else, where no file names a known
/// quant, the first by name. `None` if there is no GGUF at all.
pub fn select<'a>(cands: &'a [Candidate], quant: &str) -> Option<&'a Candidate> {
    if let Some(c) = cands.iter().find(|c| has_quant(c.name(), quant)) {
        return Some(c);
    }
    let want = PREFERENCE
        .iter()
        .position(|q| q.eq_ignore_ascii_case(quant))
        .unwrap_or(0) as i64;
    cands
        .iter()
        .filter_map(|c| {
            let q = quant_of(c.name())?;
            let pos = PREFERENCE.iter().position(|p| *p == q)? as i64;
            Some(((pos - want).abs(), pos, c))
        })
        .min_by_key(|(d, pos, _)| (*d, *pos))
        .map(|(_, _, c)| c)
        .or_else(|| cands.first())
}
