//! Splitting input text at special-token texts, as llama.cpp's `tokenizer_st_partition`.
//!
//! Special tokens are tried longest text first; each one splits every remaining plain-text
//! fragment at all of its occurrences. Only the plain fragments then go through BPE, so a
//! special token never merges with its neighbours.

/// One piece of partitioned input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'a> {
    /// Plain text, to be BPE-encoded.
    Text(&'a str),
    /// A special token matched verbatim.
    Token(u32),
}

/// A special token that may be matched in input text.
#[derive(Clone, Debug)]
pub(crate) struct SpecialText {
    pub text: String,
    pub id: u32,
    /// Matched even when the caller did not ask to parse special tokens: llama.cpp always
    /// matches user-defined tokens, but control tokens only with `parse_special`.
    pub always: bool,
    /// Whitespace right after the token is dropped (llama.cpp's `RSTRIP` attribute,
    /// which it gives to Phi-3's special tokens).
    pub rstrip: bool,
}

/// llama.cpp's Phi-3 rule: every special token (`</s>` included) strips whitespace to
/// its right, except `<unk>`, `<s>` and `<|endoftext|>`.
pub(crate) fn phi3_rstrip(
    specials: &mut [SpecialText],
    by_text: &std::collections::HashMap<&str, u32>,
) {
    let keep: Vec<u32> = ["<unk>", "<s>", "<|endoftext|>"]
        .iter()
        .filter_map(|t| by_text.get(t).copied())
        .collect();
    for special in specials {
        special.rstrip = !keep.contains(&special.id);
    }
}

/// C's `isspace` in the "C" locale, which llama.cpp's strip uses.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Sorts `specials` into matching order: longest text first, then by id for determinism.
pub(crate) fn sort_for_matching(specials: &mut [SpecialText]) {
    specials.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
}

/// Splits `text` at the special tokens in `specials` (already in matching order).
pub(crate) fn partition<'a>(
    text: &'a str,
    specials: &[SpecialText],
    parse_special: bool,
) -> Vec<Fragment<'a>> {
    let mut fragments = vec![Fragment::Text(text)];
    for special in specials {
        if special.text.is_empty() || !(parse_special || special.always) {
            continue;
        }
        if !text.contains(special.text.as_str()) {
            continue;
        }
        let mut next = Vec::with_capacity(fragments.len() + 2);
        for fragment in fragments {
            let Fragment::Text(s) = fragment else {
                next.push(fragment);
                continue;
            };
            let mut rest_start = 0;
            while let Some(found) = s[rest_start..].find(special.text.as_str()) {
                let pos = rest_start + found;
                if pos > rest_start {
                    next.push(Fragment::Text(&s[rest_start..pos]));
                }
                next.push(Fragment::Token(special.id));
                rest_start = pos + special.text.len();
                if special.rstrip {
                    // ASCII whitespace only, so `rest_start` stays on a char boundary.
                    while s
                        .as_bytes()
                        .get(rest_start)
                        .copied()
                        .is_some_and(is_c_space)
                    {
                        rest_start += 1;
                    }
                }
            }
            if rest_start < s.len() {
                next.push(Fragment::Text(&s[rest_start..]));
            }
        }
        fragments = next;
    }
    fragments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specials() -> Vec<SpecialText> {
        let mut v = vec![
            SpecialText {
                text: "<a>".into(),
                id: 1,
                always: false,
                rstrip: false,
            },
            SpecialText {
                text: "<a><b>".into(),
                id: 2,
                always: false,
                rstrip: false,
            },
            SpecialText {
                text: "<u>".into(),
                id: 3,
                always: true,
                rstrip: false,
            },
        ];
        sort_for_matching(&mut v);
        v
    }

    #[test]
    fn longest_special_wins_and_text_between_is_kept() {
        use Fragment::*;
        let got = partition("x<a><b>y<a>z<u>", &specials(), true);
        assert_eq!(
            got,
            vec![
                Text("x"),
                Token(2),
                Text("y"),
                Token(1),
                Text("z"),
                Token(3)
            ]
        );
    }

    #[test]
    fn rstrip_drops_whitespace_after_the_token_only() {
        use Fragment::*;
        let mut v = specials();
        v.iter_mut().for_each(|s| s.rstrip = s.id == 1);
        let got = partition("x <a> \n\ty<a>  <u> z", &v, true);
        assert_eq!(
            got,
            vec![
                Text("x "),
                Token(1),
                Text("y"),
                Token(1),
                Token(3),
                Text(" z")
            ]
        );
    }

    #[test]
    fn without_parse_special_only_user_defined_tokens_match() {
        use Fragment::*;
        let got = partition("<a>q<u>", &specials(), false);
        assert_eq!(got, vec![Text("<a>q"), Token(3)]);
    }
}
