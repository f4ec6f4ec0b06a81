//! The order of the filtering stages (llama.cpp's `samplers`), as names or as its one-letter
//! string form.

/// One stage of the sampler chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Repetition, frequency and presence penalties.
    Penalties,
    Dry,
    TopNSigma,
    TopK,
    TypicalP,
    TopP,
    MinP,
    Xtc,
    Temperature,
}

/// folio's order when a request names none: the penalties on the raw logits, then
/// temperature before the filters (OpenAI's and vLLM's order, so that a request without
/// llama.cpp fields samples exactly as before they existed), XTC last.
pub const DEFAULT_ORDER: &[Stage] = &[
    Stage::Penalties,
    Stage::Dry,
    Stage::Temperature,
    Stage::TopNSigma,
    Stage::TopK,
    Stage::TypicalP,
    Stage::MinP,
    Stage::TopP,
    Stage::Xtc,
];

impl Stage {
    /// A name as llama.cpp spells it (`top_k`, `top-k`, `topk`, `typ_p`, `typical_p`,
    /// `nucleus`, `temp`, …; any case).
    pub fn from_name(name: &str) -> Option<Stage> {
        let n: String = name
            .to_ascii_lowercase()
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect();
        Some(match n.as_str() {
            "penalties" => Stage::Penalties,
            "dry" => Stage::Dry,
            "topnsigma" => Stage::TopNSigma,
            "topk" => Stage::TopK,
            "typp" | "typ" | "typicalp" | "typical" => Stage::TypicalP,
            "topp" | "nucleus" => Stage::TopP,
            "minp" => Stage::MinP,
            "xtc" => Stage::Xtc,
            "temperature" | "temp" => Stage::Temperature,
            _ => return None,
        })
    }

    /// llama.cpp's one-letter form (`--sampling-seq`, the `samplers` string).
    pub fn from_char(c: char) -> Option<Stage> {
        Some(match c {
            'e' => Stage::Penalties,
            'd' => Stage::Dry,
            's' => Stage::TopNSigma,
            'k' => Stage::TopK,
            'y' => Stage::TypicalP,
            'p' => Stage::TopP,
            'm' => Stage::MinP,
            'x' => Stage::Xtc,
            't' => Stage::Temperature,
            _ => return None,
        })
    }

    /// Whether it works on the logits with the output so far (penalties, DRY): these run
    /// before any filter, wherever the list puts them; leaving one out turns it off.
    pub fn is_history(self) -> bool {
        matches!(self, Stage::Penalties | Stage::Dry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_letters() {
        let names = [
            "top_k",
            "Top-P",
            "typ_p",
            "temp",
            "min_p",
            "xtc",
            "dry",
            "penalties",
            "top_n_sigma",
        ];
        let got: Vec<_> = names.iter().map(|n| Stage::from_name(n).unwrap()).collect();
        let letters: Vec<_> = "kpytmxdes"
            .chars()
            .map(|c| Stage::from_char(c).unwrap())
            .collect();
        assert_eq!(got, letters);
        assert_eq!(Stage::from_name("infill"), None);
        assert_eq!(Stage::from_char('i'), None);
    }
}
