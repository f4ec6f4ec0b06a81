//! llama.cpp's pre-tokenizer regexes and which `tokenizer.ggml.pre` names select them.
//!
//! The regexes are reproduced exactly from llama.cpp's `llm_tokenizer_bpe` constructor
//! (src/llama-vocab.cpp, build b11312), the names from its `tokenizer_pre` table in
//! `llama_vocab::impl::load`. Where llama.cpp rewrote a tokenizer.json regex (case-insensitive
//! groups spelled out, `\p{Lu}…`-classes replaced by lookaheads), its rewrite is used: that is
//! what splits the text in llama.cpp, and these engines agree with it.

/// GPT-2's word regex (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_GPT2`).
pub(crate) const GPT2: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Llama 3's word regex: case-insensitive contractions, numbers in groups of up to three.
pub(crate) const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 2's word regex: as Llama 3's but every digit is its own word.
pub(crate) const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Mistral's Tekken: words split at lower→upper case changes, single digits, `/` kept with
/// punctuation runs.
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// o200k (GPT-4o, gpt-oss, Llama 4): Tekken's case split with contractions and numbers in
/// groups of up to three.
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Falcon: punctuation runs, GPT-2's words, then digits in threes.
const FALCON: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"];

/// DeepSeek LLM (V2): newlines, Latin/Greek/Cyrillic/… letter runs, ASCII and full-width
/// punctuation, trailing spaces, CJK runs, digit runs.
///
/// NOTE: llama.cpp matches these literal-range regexes with every non-ASCII whitespace
/// replaced by `\v` (unicode.cpp: std::wregex's `\s` misses them), so a space such as
/// U+2009 or U+3000 is never inside a range: the ranges that span one carry `&&\S`.
const DEEPSEEK_LLM: &[&str] = &[
    "[\r\n]",
    r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    r"\s?[!-/:-~！-／：-～‘-‟　-。&&\S]+",
    r"\s+$",
    r"[一-龥ࠀ-一가-퟿&&\S]+",
    r"\p{N}+",
];

/// DeepSeek Coder.
const DEEPSEEK_CODER: &[&str] = &[
    "[\r\n]",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    r"[一-龥ࠀ-一가-퟿&&\S]+",
    r"\p{N}",
];

/// DeepSeek V3 / R1: digits in threes, CJK and kana runs, then words with marks.
const DEEPSEEK3: &[&str] = &[
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];

/// Kimi K2. llama.cpp splits it with a hand-written function (unicode.cpp's
/// `unicode_regex_split_custom_kimi_k2`) in place of tokenization_kimi.py's regex; this is
/// that function as a regex: Han runs; other letters (no case split, marks not letters)
/// with an optional leading non-letter and an optional contraction; digits in threes;
/// punctuation runs; newlines; spaces.
const KIMI_K2: &str = r"\p{Han}+|[^\r\n\p{L}\p{N}]?[\p{L}&&\P{Han}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One llama.cpp pre-tokenizer type: the `pre` names that select it and what it does.
pub(crate) struct Family {
    pub names: &'static [&'static str],
    pub regexes: &'static [&'static str],
    /// llama.cpp's `ignore_merges`: a word that is a vocabulary entry is that token.
    pub ignore_merges: bool,
    /// llama.cpp's `add_bos` default for the type (the file's `add_bos_token` overrides).
    pub add_bos: bool,
}

const fn family(
    names: &'static [&'static str],
    regexes: &'static [&'static str],
    ignore_merges: bool,
    add_bos: bool,
) -> Family {
    Family {
        names,
        regexes,
        ignore_merges,
        add_bos,
    }
}

/// Every `pre` name folio knows (`default` aside), grouped as llama.cpp groups them.
pub(crate) const FAMILIES: &[Family] = &[
    // STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2.
    family(
        &[
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        &[r"\p{N}", GPT2],
        false,
        false,
    ),
    // GPT2, MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING (and EXAONE 4, which llama.cpp maps
    // to GPT2).
    family(
        &[
            "gpt2",
            "gpt-2",
            "phi-2",
            "mpt",
            "olmo",
            "roberta-bpe",
            "jais",
            "trillion",
            "granite-docling",
            "exaone4",
            "gigachat",
        ],
        &[GPT2],
        false,
        false,
    ),
    family(
        &["llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"],
        &[LLAMA3],
        true,
        true,
    ),
    // DBRX and SMAUG: Llama 3's regex, merges always applied (OLMo 2's files say "dbrx").
    family(&["dbrx", "smaug-bpe"], &[LLAMA3], false, false),
    // CHATGLM4: Llama 3's regex; `glm4` also ignores merges.
    family(&["glm4", "glm5"], &[LLAMA3], true, false),
    family(&["chatglm-bpe"], &[LLAMA3], false, false),
    family(
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
            "kormo",
            "f2llmv2",
        ],
        &[QWEN2],
        false,
        false,
    ),
    family(&["falcon"], FALCON, false, false),
    family(&["tekken"], &[TEKKEN], true, true),
    family(
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        &[GPT4O],
        false,
        false,
    ),
    family(&["deepseek-llm"], DEEPSEEK_LLM, false, false),
    family(&["deepseek-coder"], DEEPSEEK_CODER, false, false),
    family(
        &["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
        DEEPSEEK3,
        false,
        false,
    ),
    family(&["kimi-k2"], &[KIMI_K2], false, false),
];

/// The `pre` names for which llama.cpp has no BOS token whatever the file says
/// (`special_bos_id = LLAMA_TOKEN_NULL`: GLM's `[gMASK]<sop>` prefix comes from its chat
/// template instead).
pub(crate) const NO_BOS: &[&str] = &["chatglm-bpe", "glm4", "glm5"];

/// llama.cpp's fallback list for BPE vocabularies without a known pre-tokenizer.
pub(crate) const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"];
