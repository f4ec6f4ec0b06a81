//! Pre-tokenizer rules: how text is split into words before BPE merges run.
//!
//! llama.cpp picks a list of regexes from `tokenizer.ggml.pre` and applies them in turn:
//! each regex splits every piece left by the previous one, and both the matches and the
//! text between matches become pieces. `tokenizers`' `Split` with the `Isolated` behaviour
//! does exactly that, so each llama.cpp regex becomes one `Split`, followed by a
//! `ByteLevel` step (without its own regex) that maps bytes to GPT-2's printable chars.
//!
//! NOTE: an unknown `pre` is an error, not a fallback to `default`: the wrong split rules
//! still produce plausible text but different token ids than the model was trained on.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use crate::error::{Result, TokenizerError};

use crate::pre_regex::{DEFAULT, FAMILIES};

/// The split rules selected by one `tokenizer.ggml.pre` value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PreRules {
    /// Regexes applied in order (see the module doc).
    pub regexes: Vec<&'static str>,
    /// A word that is itself a vocabulary entry becomes that token without running merges
    /// (llama.cpp's `tokenizer_ignore_merges`, set for Llama 3, Tekken and GLM-4).
    pub ignore_merges: bool,
}

/// Whether llama.cpp adds BOS by default for `pre` (Llama 3 and Tekken vocabularies; the
/// file's `add_bos_token` overrides).
pub(crate) fn adds_bos(pre: &str) -> bool {
    FAMILIES.iter().any(|f| f.add_bos && f.names.contains(&pre))
}

/// The rules for `pre` (`None` = llama.cpp's `default`).
pub(crate) fn rules_for(pre: Option<&str>) -> Result<PreRules> {
    let pre = pre.unwrap_or("default");
    if pre == "default" {
        return Ok(PreRules {
            regexes: DEFAULT.to_vec(),
            ignore_merges: false,
        });
    }
    match FAMILIES.iter().find(|f| f.names.contains(&pre)) {
        Some(f) => Ok(PreRules {
            regexes: f.regexes.to_vec(),
            ignore_merges: f.ignore_merges,
        }),
        None => {
            let known = std::iter::once("default")
                .chain(FAMILIES.iter().flat_map(|f| f.names.iter().copied()))
                .collect::<Vec<_>>()
                .join(", ");
            Err(TokenizerError::UnsupportedPre {
                pre: pre.to_owned(),
                known,
            })
        }
    }
}

/// The `tokenizers` pre-tokenizer implementing `rules`.
pub(crate) fn build(rules: &PreRules) -> Result<PreTokenizerWrapper> {
    let mut steps = Vec::with_capacity(rules.regexes.len() + 1);
    for re in &rules.regexes {
        let split = Split::new(
            SplitPattern::Regex((*re).to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| TokenizerError::Build(format!("pre-tokenizer regex {re:?}: {e}")))?;
        steps.push(PreTokenizerWrapper::Split(split));
    }
    steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
        false, true, false,
    )));
    Ok(PreTokenizerWrapper::Sequence(Sequence::new(steps)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_pre_is_an_error_naming_it() {
        let err = rules_for(Some("mystery")).unwrap_err().to_string();
        assert!(err.contains("\"mystery\""), "{err}");
        assert!(err.contains("smollm"), "{err}");
    }

    #[test]
    fn llama3_ignores_merges_and_smollm_splits_digits_first() {
        assert!(rules_for(Some("llama-bpe")).unwrap().ignore_merges);
        assert_eq!(rules_for(Some("smollm")).unwrap().regexes[0], r"\p{N}");
        assert_eq!(rules_for(None).unwrap().regexes.len(), 4);
    }

    #[test]
    fn every_regex_compiles() {
        for f in FAMILIES {
            for name in f.names {
                build(&rules_for(Some(name)).unwrap()).unwrap();
            }
        }
        assert!(adds_bos("tekken") && adds_bos("llama-bpe") && !adds_bos("gpt-4o"));
    }
}

#[cfg(test)]
mod equivalence {
    //! The measured configuration for `smollm` (Digits(individual) + ByteLevel with its
    //! own regex) reproduced llama.cpp; the generic Split chain must split identically.
    use tokenizers::pre_tokenizers::digits::Digits;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    use super::*;

    fn pieces(pt: &dyn PreTokenizer, text: &str) -> Vec<String> {
        let mut s = PreTokenizedString::from(text);
        pt.pre_tokenize(&mut s).unwrap();
        s.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(piece, _, _)| piece.to_owned())
            .collect()
    }

    #[test]
    fn smollm_split_chain_equals_digits_plus_byte_level() {
        let ours = build(&rules_for(Some("smollm")).unwrap()).unwrap();
        let measured = Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
        ]);
        for text in [
            "Hello world",
            "  two  spaces   three\t\ttabs\n\n\nlines \n x",
            "I'm sure they'll say it's 12345.678 + 0x1F",
            "a \n!b\r\n\r\n  c",
            "naïve café — 日本語のテキスト 🦀👍🏽",
            "fn main() {\n    println!(\"{}\", 1 << 3);\n}   ",
            "x1y22z333 4444",
        ] {
            assert_eq!(pieces(&ours, text), pieces(&measured, text), "{text:?}");
        }
    }
}
