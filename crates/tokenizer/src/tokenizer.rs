//! [`Tokenizer`]: text ⇄ token ids for a GGUF model, matching llama.cpp's ids.
//!
//! Encoding: split the input at special-token texts ([`crate::special`]), then run each
//! plain fragment through the vocabulary's model: for `gpt2`, a `tokenizers` BPE whose
//! pre-tokenizer reproduces llama.cpp's split regexes ([`crate::pretokenize`]); for
//! `llama`, llama.cpp's SentencePiece merge ([`crate::spm`]). Decoding: concatenate each
//! token's raw bytes (precomputed once) and convert to UTF-8 at the very end.

use std::collections::HashMap;

use folio_gguf::GgufFile;
use tokenizers::models::bpe::{Vocab, BPE};

use crate::byte_level::ByteDecoder;
use crate::chat::{ChatMessage, ChatTemplate};
use crate::error::{Result, TokenizerError};
use crate::pretokenize;
use crate::spec::{token_type, TokenizerSpec};
use crate::special::{self, Fragment, SpecialText};
use crate::spm::{self, Spm};

/// Largest vocabulary accepted. Ids are u32; the cap keeps a crafted file from making us
/// allocate per-token tables of absurd size.
pub const MAX_VOCAB: usize = 1 << 24;

/// Token texts that end a turn, in llama.cpp's order for picking the end-of-turn token
/// when the metadata names none.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// The texts by which llama.cpp (`llama_vocab::load`) finds the fill-in-the-middle pad,
/// repository and file-separator tokens, which it adds to the end-of-generation set.
const FIM_EOG_TEXTS: [&[&str]; 3] = [
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    &[
        "<|fim_repo|>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
    ],
    &["<|file_sep|>"],
];

/// Token texts that end generation in common chat formats. llama.cpp treats each one
/// present in the vocabulary as end-of-generation, whatever the metadata says, and makes
/// it a control token if the file did not (Gemma 3's `</s>` is typed normal).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<｜end▁of▁sentence｜>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "[e~[",
];

/// GPT-OSS's harmony header markers, which llama.cpp always renders (it retypes them
/// user-defined whatever the file says): a completion's text then carries the channel
/// structure its harmony reader needs, with or without special tokens shown.
const HARMONY_MARKERS: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// How plain text becomes ids.
enum Model {
    /// `gpt2`: BPE model + pre-tokenizer, with no added tokens: special tokens are
    /// matched by [`special::partition`] so that `parse_special = false` can leave them
    /// as text.
    Bpe(Box<tokenizers::Tokenizer>),
    /// `llama`: SentencePiece.
    Spm {
        spm: Box<Spm>,
        /// Prepend a space to text at the start and after a special token.
        add_space_prefix: bool,
    },
}

/// A byte-level BPE or SentencePiece tokenizer built from GGUF metadata. `Send + Sync`;
/// share it via `Arc`.
pub struct Tokenizer {
    model: Model,
    /// Raw bytes of every token, indexed by id.
    bytes: Vec<Vec<u8>>,
    /// `tokenizer.ggml.token_type` per id.
    types: Vec<i32>,
    /// Control and user-defined tokens, in matching order (longest text first).
    specials: Vec<SpecialText>,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    eot_id: Option<u32>,
    /// Sorted, without duplicates.
    eog_ids: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    template: Option<ChatTemplate>,
    /// See [`Tokenizer::min_tokens`].
    bound: TokenBound,
}

/// What [`Tokenizer::min_tokens`] needs: how many text bytes one token stands for at
/// most, and which bytes become no token at all.
#[derive(Clone, Debug)]
struct TokenBound {
    /// The longest token in bytes (for a special token, the text it matches); at least 4
    /// (an unknown token stands for one char). `None`: no bound (a special token that
    /// swallows the whitespace after it, `rstrip`).
    longest: Option<usize>,
    /// Bytes without a one-byte token in a byte-level vocabulary: the BPE drops them.
    dropped: [bool; 256],
}

impl Tokenizer {
    /// Reads the tokenizer from a GGUF file's metadata.
    pub fn from_gguf(f: &GgufFile) -> Result<Tokenizer> {
        Tokenizer::from_spec(TokenizerSpec::from_gguf(f)?)
    }

    /// Builds the tokenizer described by `spec`.
    pub fn from_spec(spec: TokenizerSpec) -> Result<Tokenizer> {
        if spec.model != "gpt2" && spec.model != "llama" {
            return Err(TokenizerError::UnsupportedModel { model: spec.model });
        }
        let n = spec.tokens.len();
        if n == 0 || n > MAX_VOCAB {
            return Err(TokenizerError::VocabSize {
                size: n,
                limit: MAX_VOCAB,
            });
        }
        let mut types = if spec.token_types.is_empty() {
            vec![token_type::NORMAL; n]
        } else if spec.token_types.len() == n {
            spec.token_types.clone()
        } else {
            return Err(TokenizerError::LengthMismatch {
                field: "tokenizer.ggml.token_type",
                len: spec.token_types.len(),
                vocab: n,
            });
        };
        for (field, id) in [
            ("tokenizer.ggml.bos_token_id", spec.bos_id),
            ("tokenizer.ggml.eos_token_id", spec.eos_id),
            ("tokenizer.ggml.eot_token_id", spec.eot_id),
            ("tokenizer.ggml.unknown_token_id", spec.unk_id),
        ] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(TokenizerError::IdOutOfRange {
                    field,
                    id: id.into(),
                    vocab: n,
                });
            }
        }

        let by_text: HashMap<&str, u32> = spec
            .tokens
            .iter()
            .enumerate()
            .map(|(id, t)| (t.as_str(), id as u32))
            .collect();
        // llama.cpp makes every end-of-generation text a control token.
        for id in EOG_TEXTS.iter().filter_map(|t| by_text.get(t)) {
            types[*id as usize] = token_type::CONTROL;
        }
        let eot_id = spec
            .eot_id
            .or_else(|| EOT_TEXTS.iter().find_map(|t| by_text.get(t).copied()));
        let mut eog_ids: Vec<u32> = spec
            .eos_id
            .into_iter()
            .chain(eot_id)
            .chain(EOG_TEXTS.iter().filter_map(|t| by_text.get(t).copied()))
            .collect();
        // llama.cpp also ends generation at the fill-in-the-middle pad, repository and file
        // separator tokens (its `special_fim_{pad,rep,sep}_id`), first text found of each.
        for texts in FIM_EOG_TEXTS {
            if let Some(&id) = texts.iter().find_map(|t| by_text.get(t)) {
                types[id as usize] = token_type::CONTROL;
                eog_ids.push(id);
            }
        }
        eog_ids.sort_unstable();
        eog_ids.dedup();
        drop_eog_exceptions(&mut eog_ids, &mut types, &spec.tokens);
        for id in HARMONY_MARKERS.iter().filter_map(|t| by_text.get(t)) {
            types[*id as usize] = token_type::USER_DEFINED;
        }

        let (model, bytes): (Model, Vec<Vec<u8>>) = if spec.model == "llama" {
            let spm = Spm::new(&spec.tokens, &spec.scores, &types, spec.unk_id)?;
            let bytes = spec
                .tokens
                .iter()
                .zip(&types)
                .map(|(text, &ty)| spm::token_raw_bytes(text, ty))
                .collect();
            let model = Model::Spm {
                spm: Box::new(spm),
                add_space_prefix: spec.add_space_prefix,
            };
            (model, bytes)
        } else {
            let rules = pretokenize::rules_for(spec.pre.as_deref())?;
            let bpe = build_bpe(&spec.tokens, &spec.merges, rules.ignore_merges)?;
            let mut bpe = tokenizers::Tokenizer::new(bpe);
            bpe.with_pre_tokenizer(Some(pretokenize::build(&rules)?));
            let decoder = ByteDecoder::new();
            let bytes = spec
                .tokens
                .iter()
                .zip(&types)
                .map(|(text, &ty)| token_raw_bytes(&decoder, text, ty))
                .collect();
            (Model::Bpe(Box::new(bpe)), bytes)
        };

        let mut specials: Vec<SpecialText> = spec
            .tokens
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (_, &ty))| {
                matches!(
                    ty,
                    token_type::CONTROL | token_type::USER_DEFINED | token_type::UNKNOWN
                )
            })
            .map(|(id, (text, &ty))| SpecialText {
                text: text.clone(),
                id: id as u32,
                always: ty == token_type::USER_DEFINED,
                rstrip: false,
            })
            .collect();
        if is_phi3(spec.name.as_deref()) {
            special::phi3_rstrip(&mut specials, &by_text);
        }
        special::sort_for_matching(&mut specials);

        let fallback = (spec.chat_template.is_none()
            && by_text.contains_key("<start_of_turn>")
            && by_text.contains_key("<end_of_turn>"))
        .then_some(crate::chat::GEMMA_TEMPLATE);
        let template = spec.chat_template.as_deref().or(fallback).map(|src| {
            let token_text = |id: Option<u32>| {
                id.and_then(|id| spec.tokens.get(id as usize))
                    .cloned()
                    .unwrap_or_default()
            };
            ChatTemplate::new(src, token_text(spec.bos_id), token_text(spec.eos_id))
        });

        let bound = TokenBound::new(&model, &bytes, &types, &specials);
        Ok(Tokenizer {
            bound,
            model,
            bytes,
            types,
            specials,
            bos_id: spec.bos_id,
            eos_id: spec.eos_id,
            eot_id,
            eog_ids,
            add_bos: spec.add_bos,
            add_eos: spec.add_eos,
            template,
        })
    }

    /// Token ids for `text`, as llama.cpp's `llama_tokenize` with `add_special`. Adds
    /// BOS/EOS only when the model asks for it (`add_bos_token` / `add_eos_token`). With
    /// `parse_special`, the text of a control token (e.g. `<|im_start|>`) becomes that
    /// one token; without it, it is encoded as ordinary text. User-defined tokens are
    /// always matched (as in llama.cpp). A SentencePiece vocabulary with
    /// `add_space_prefix` gets a space before the text at the start and after each
    /// special token, as llama.cpp (never before an empty text: `""` is just BOS).
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        if self.add_bos {
            ids.extend(self.bos_id);
        }
        let mut prev_special = true;
        for fragment in special::partition(text, &self.specials, parse_special) {
            match fragment {
                Fragment::Token(id) => {
                    ids.push(id);
                    prev_special = true;
                }
                Fragment::Text("") => {}
                Fragment::Text(s) => match &self.model {
                    Model::Bpe(bpe) => {
                        let enc = bpe
                            .encode(s, false)
                            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
                        ids.extend_from_slice(enc.get_ids());
                    }
                    Model::Spm {
                        spm,
                        add_space_prefix,
                    } => {
                        if *add_space_prefix && prev_special {
                            spm.encode_into(&format!(" {s}"), &mut ids)?;
                        } else {
                            spm.encode_into(s, &mut ids)?;
                        }
                        prev_special = false;
                    }
                },
            }
        }
        if self.add_eos {
            ids.extend(self.eos_id);
        }
        Ok(ids)
    }

    /// The text of `ids`. With `skip_special`, special tokens (see [`Self::is_special`])
    /// produce nothing. Ids outside the vocabulary are skipped. Invalid UTF-8 is replaced
    /// by U+FFFD only after all bytes are joined, so multi-byte chars split across tokens
    /// survive (SentencePiece byte tokens `<0xE6>` `<0x97>` `<0xA5>` make one char).
    ///
    /// This is the concatenation of llama.cpp's `token_to_piece` for each id, as its
    /// server's `/detokenize` and its streamed output. NOTE: llama.cpp's
    /// `llama_detokenize` additionally drops one leading space of the first token when
    /// `add_space_prefix` is set (unless that token is BOS, in which case nothing is
    /// dropped); that is not done here, so that decoding a generated continuation, or
    /// one token for log-probabilities, keeps its space, and so that decoding agrees
    /// with [`crate::IncrementalDecoder`].
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut out = Vec::new();
        for &id in ids {
            if skip_special && self.is_special(id) {
                continue;
            }
            if let Some(b) = self.bytes.get(id as usize) {
                out.extend_from_slice(b);
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Raw bytes of one token: byte-level text decoded (BPE) or `▁` made a space
    /// (SentencePiece) for ordinary tokens, the byte of a `<0xNN>` token, the literal
    /// text for control tokens. Empty for ids outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.token_bytes_ref(id).to_vec()
    }

    /// [`Self::token_bytes`] without the copy.
    pub fn token_bytes_ref(&self, id: u32) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// A lower bound on `self.encode(text, _).len()`, computed without tokenizing: the
    /// text's bytes (less those the vocabulary drops) over the longest token's bytes,
    /// rounded up. A server uses it to refuse text that can never fit its context before
    /// spending memory on tokenizing it. 0 when no bound holds (see [`TokenBound`]).
    pub fn min_tokens(&self, text: &str) -> usize {
        let Some(longest) = self.bound.longest else {
            return 0;
        };
        let dropped = &self.bound.dropped;
        let kept = if dropped.contains(&true) {
            text.bytes().filter(|&b| !dropped[b as usize]).count()
        } else {
            text.len()
        };
        kept.div_ceil(longest)
    }

    /// The most text bytes one token stands for ([`Self::min_tokens`]' divisor), if bounded.
    pub fn max_token_bytes(&self) -> Option<usize> {
        self.bound.longest
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.bytes.len()
    }

    /// Beginning-of-sequence token, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    /// End-of-sequence token, if the model has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }

    /// End-of-turn token: from metadata, else the first of the well-known end-of-turn
    /// texts present in the vocabulary.
    pub fn eot_id(&self) -> Option<u32> {
        self.eot_id
    }

    /// Whether `encode` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Tokens that end generation (sorted): EOS, EOT, and every well-known end-of-turn
    /// token text present in the vocabulary (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`,
    /// `<end_of_turn>`, …), as llama.cpp's `special_eog_ids`.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog_ids
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog_ids.binary_search(&id).is_ok()
    }

    /// Whether `id` is a special token: control, unknown or unused (anything that is not
    /// ordinary or user-defined text). False for ids outside the vocabulary.
    pub fn is_special(&self, id: u32) -> bool {
        self.types.get(id as usize).is_some_and(|&ty| {
            !matches!(
                ty,
                token_type::NORMAL | token_type::USER_DEFINED | token_type::BYTE
            )
        })
    }

    /// The model's Jinja chat template, if it has one; a vocabulary with Gemma's
    /// `<start_of_turn>` / `<end_of_turn>` but no template gets llama.cpp's built-in
    /// "gemma" format.
    pub fn chat_template(&self) -> Option<&str> {
        self.template.as_ref().map(ChatTemplate::source)
    }

    /// Renders `messages` with the model's chat template (Hugging Face semantics: the
    /// template sees `messages`, `add_generation_prompt`, `bos_token` and `eos_token`).
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.apply_chat_template_with(messages, add_generation_prompt, &serde_json::Map::new())
    }

    /// [`Tokenizer::apply_chat_template`] with extra template variables (vLLM's
    /// `chat_template_kwargs`, e.g. `{"enable_thinking": false}`); the standard variables
    /// (`messages`, `add_generation_prompt`, `bos_token`, `eos_token`) cannot be overridden.
    pub fn apply_chat_template_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        self.template
            .as_ref()
            .ok_or(TokenizerError::NoChatTemplate)?
            .render(
                messages,
                add_generation_prompt,
                minijinja::Value::from_serialize(kwargs),
            )
    }

    /// Replaces the model's chat template with `source` (a Jinja file given on the command
    /// line); unlike a broken template inside the model file, one that does not compile is
    /// an error here.
    pub fn set_chat_template(&mut self, source: &str) -> Result<()> {
        let (bos, eos) = match &self.template {
            Some(t) => t.bos_eos(),
            None => {
                let text =
                    |id: Option<u32>| id.map_or(String::new(), |id| self.decode(&[id], false));
                (text(self.bos_id), text(self.eos_id))
            }
        };
        let t = ChatTemplate::new(source, bos, eos);
        t.compiled()?;
        self.template = Some(t);
        Ok(())
    }
}

/// llama.cpp's two exceptions to its end-of-generation texts: with `<|return|>` and
/// `<|call|>` (gpt-oss), or `<|calls|>`/`<|call|>` and `<|flush|>` (solar-open),
/// `<|end|>` is a user-defined token, not EOG; with `<|tool_response>` (Gemma 4) or
/// `<|plamo:eos|>`, `</s>` is a normal token, not EOG.
fn drop_eog_exceptions(eog_ids: &mut Vec<u32>, types: &mut [i32], tokens: &[String]) {
    let find = |text: &str| {
        eog_ids
            .iter()
            .copied()
            .find(|&id| tokens[id as usize] == text)
    };
    let has = |text: &str| find(text).is_some();
    let has_call = has("<|call|>") || has("<|calls|>");
    let end = find("<|end|>").filter(|_| has_call && (has("<|return|>") || has("<|flush|>")));
    let s = find("</s>").filter(|_| has("<|tool_response>") || has("<|plamo:eos|>"));
    for (id, ty) in [(end, token_type::USER_DEFINED), (s, token_type::NORMAL)] {
        if let Some(id) = id {
            eog_ids.retain(|&x| x != id);
            types[id as usize] = ty;
        }
    }
}

/// Whether llama.cpp treats the model as Phi-3 (by `general.name`, lower-cased).
fn is_phi3(name: Option<&str>) -> bool {
    name.is_some_and(|n| {
        let n = n.to_lowercase();
        n.contains("phi-3") || n.contains("phi3")
    })
}

/// The `tokenizers` BPE for a GGUF vocabulary (id = position) and merge list.
fn build_bpe(tokens: &[String], merges: &[String], ignore_merges: bool) -> Result<BPE> {
    // NOTE: with duplicate token texts the last id wins, as in llama.cpp's `token_to_id`.
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), id as u32))
        .collect();
    let mut pairs = Vec::with_capacity(merges.len());
    for (index, merge) in merges.iter().enumerate() {
        // llama.cpp searches for the separator from byte 1, so a left part may start with
        // a space.
        // (A space byte is never inside a multi-byte char, so byte positions are safe.)
        let split = merge
            .as_bytes()
            .iter()
            .skip(1)
            .position(|&b| b == b' ')
            .map(|p| p + 1)
            .ok_or_else(|| TokenizerError::BadMerge {
                index,
                value: merge.clone(),
            })?;
        let (left, right) = (&merge[..split], &merge[split + 1..]);
        // NOTE: `tokenizers` rejects a rule whose parts or result are not in the
        // vocabulary; llama.cpp applies it and spells the unknown result as byte tokens.
        // Dropping such rules (only broken vocabularies have them) keeps the model usable.
        let joined = format!("{left}{right}");
        if vocab.contains_key(left) && vocab.contains_key(right) && vocab.contains_key(&joined) {
            pairs.push((left.to_owned(), right.to_owned()));
        }
    }
    BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| TokenizerError::Build(e.to_string()))
}

/// What one token contributes to decoded output.
fn token_raw_bytes(decoder: &ByteDecoder, text: &str, ty: i32) -> Vec<u8> {
    match ty {
        // Byte-level text; a user-defined token stored verbatim (chars outside the
        // byte alphabet) is taken as is.
        token_type::NORMAL | token_type::USER_DEFINED => decoder
            .decode(text)
            .unwrap_or_else(|| text.as_bytes().to_vec()),
        _ => text.as_bytes().to_vec(),
    }
}

impl TokenBound {
    fn new(model: &Model, bytes: &[Vec<u8>], types: &[i32], specials: &[SpecialText]) -> Self {
        let mut dropped = [false; 256];
        if let Model::Bpe(_) = model {
            // Each byte of a piece starts as its one-char token; without one, the BPE
            // (built without an unknown token) skips it.
            let mut seen = [false; 256];
            for (b, &ty) in bytes.iter().zip(types) {
                if let ([byte], token_type::NORMAL) = (b.as_slice(), ty) {
                    seen[*byte as usize] = true;
                }
            }
            for (d, s) in dropped.iter_mut().zip(seen) {
                *d = !s;
            }
        }
        let longest = bytes
            .iter()
            .map(Vec::len)
            .chain(specials.iter().map(|s| s.text.len()))
            .max()
            .unwrap_or(0)
            .max(4);
        TokenBound {
            longest: (!specials.iter().any(|s| s.rstrip)).then_some(longest),
            dropped,
        }
    }
}

/// Servers share one tokenizer across threads behind an `Arc`.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
    assert_send_sync::<crate::IncrementalDecoder>();
};
