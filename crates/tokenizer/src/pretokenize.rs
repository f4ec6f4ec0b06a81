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

/// GPT-2's word regex (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_GPT2`).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Llama 3's word regex: case-insensitive contractions, numbers in groups of up to three.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 2's word regex: as Llama 3's but every digit is its own word.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The split rules selected by one `tokenizer.ggml.pre` value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PreRules {
    /// Regexes applied in order (see the module doc).
    pub regexes: Vec<&'static str>,
    /// A word that is itself a vocabulary entry becomes that token without running merges
    /// (llama.cpp's `tokenizer_ignore_merges`, set for Llama 3).
    pub ignore_merges: bool,
}

const SMOLLM_NAMES: &[&str] = &[
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "minerva-7b",
];
const GPT2_NAMES: &[&str] = &["gpt2", "gpt-2", "phi-2", "mpt", "olmo", "roberta-bpe"];
const LLAMA3_NAMES: &[&str] = &["llama3", "llama-v3", "llama-bpe", "falcon3"];
const QWEN2_NAMES: &[&str] = &["qwen2", "deepseek-r1-qwen", "megrez"];

/// True for the `pre` names llama.cpp treats as Llama 3 (which also default to adding BOS).
pub(crate) fn is_llama3_family(pre: &str) -> bool {
    LLAMA3_NAMES.contains(&pre)
}

/// The rules for `pre` (`None` = llama.cpp's `default`).
pub(crate) fn rules_for(pre: Option<&str>) -> Result<PreRules> {
    let pre = pre.unwrap_or("default");
    let (regexes, ignore_merges) = if pre == "default" {
        // llama.cpp's fallback list for BPE vocabularies without a known pre-tokenizer.
        (
            vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
            false,
        )
    } else if SMOLLM_NAMES.contains(&pre) {
        (vec![r"\p{N}", GPT2], false)
    } else if GPT2_NAMES.contains(&pre) {
        (vec![GPT2], false)
    } else if LLAMA3_NAMES.contains(&pre) {
        (vec![LLAMA3], true)
    } else if QWEN2_NAMES.contains(&pre) {
        (vec![QWEN2], false)
    } else {
        let known = ["default"]
            .iter()
            .chain(SMOLLM_NAMES)
            .chain(GPT2_NAMES)
            .chain(LLAMA3_NAMES)
            .chain(QWEN2_NAMES)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        return Err(TokenizerError::UnsupportedPre {
            pre: pre.to_owned(),
            known,
        });
    };
    Ok(PreRules {
        regexes,
        ignore_merges,
    })
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
