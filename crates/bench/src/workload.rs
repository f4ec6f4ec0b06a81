//! Workloads generated locally from a seed (no downloads), as conversations of turns.
//!
//! Prompts are made of common English words that byte-level BPE vocabularies (GPT-2,
//! Llama, SmolLM, Qwen) hold as single tokens with their leading space, so a prompt of `n`
//! words is about `n` tokens on any server; the server's usage reports the exact count.
//!
//! - `random`: independent prompts of `input_tokens` (± `range_ratio`) words;
//! - `shared-prefix`: `num_prefixes` system prompts of `prefix_tokens` words shared by many
//!   requests (round robin), each followed by a distinct suffix of `input_tokens` words;
//! - `shared-prefix-shuffled`: the same, but each round of `num_prefixes` requests takes
//!   the prefixes in a fresh seeded order. For comparing routers: with `shared-prefix` and
//!   an even number of prefixes, a round-robin router over two replicas sends every prefix
//!   to the same replica by coincidence, which real traffic never does;
//! - `multi-turn`: agent-style conversations: a shared tool-definition prefix, a task, then
//!   rounds that append the model's answer and a tool output to the growing history; turn
//!   k + 1 is sent when turn k's answer has arrived;
//! - `retrieval`: a document of records `key NNNN: DDDDDD` (six-digit values) and a
//!   question about one key; [`grade`] decides whether an output answers it (the value's
//!   six digits as a number of their own, and no other number of six or more digits);
//! - `json`: structured output: each request carries its own JSON schema (an object of two
//!   to four bounded properties: strings, integer ranges, enums, booleans, small arrays),
//!   sent as `response_format` `json_schema`; [`grade_json`] counts an answer correct
//!   when it parses and validates against that schema.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Which workload to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    Random,
    SharedPrefix,
    SharedPrefixShuffled,
    MultiTurn,
    Retrieval,
    Json,
}

impl WorkloadKind {
    pub fn parse(s: &str) -> Result<Self, crate::BenchError> {
        match s {
            "random" => Ok(Self::Random),
            "shared-prefix" => Ok(Self::SharedPrefix),
            "shared-prefix-shuffled" => Ok(Self::SharedPrefixShuffled),
            "multi-turn" => Ok(Self::MultiTurn),
            "retrieval" => Ok(Self::Retrieval),
            "json" => Ok(Self::Json),
            other => Err(crate::BenchError::msg(format!(
                "--workload {other:?} is unknown (expected random, shared-prefix, shared-prefix-shuffled, multi-turn, retrieval or json)"
            ))),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::SharedPrefix => "shared-prefix",
            Self::SharedPrefixShuffled => "shared-prefix-shuffled",
            Self::MultiTurn => "multi-turn",
            Self::Retrieval => "retrieval",
            Self::Json => "json",
        }
    }
}

/// Sizes of a workload; token counts are approximate (words), see the module doc.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkloadSpec {
    pub kind: WorkloadKind,
    /// Requests in all (turns, for multi-turn).
    pub num_requests: usize,
    pub input_tokens: usize,
    pub output_tokens: usize,
    /// Lengths drawn uniformly from `[x·(1 − r), x·(1 + r)]`.
    pub range_ratio: f64,
    /// Shared-prefix (and multi-turn tool definitions) length.
    pub prefix_tokens: usize,
    pub num_prefixes: usize,
    /// Turns per conversation (multi-turn).
    pub turns: usize,
    /// Words of tool output appended per turn (multi-turn).
    pub tool_tokens: usize,
    /// Records per document (retrieval); 0 = derived from `input_tokens`.
    pub records: usize,
    pub seed: u64,
}

/// One request's part of a conversation: the text appended to the history before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub append: String,
    pub max_tokens: usize,
    /// The expected answer, judged by [`grade`].
    pub expected: Option<String>,
    /// Structured output: the JSON schema the answer must follow (sent as
    /// `response_format`), judged by [`grade_json`].
    pub schema: Option<serde_json::Value>,
}

/// Turns sent in order, each prompt = everything before + the previous answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    pub turns: Vec<Turn>,
}

/// Single-token words of common BPE vocabularies (each used with a leading space).
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "time",
    "out",
    "up",
    "into",
    "than",
    "them",
    "only",
    "other",
    "new",
    "some",
    "could",
    "these",
    "two",
    "may",
    "first",
    "then",
    "do",
    "any",
    "like",
    "my",
    "now",
    "over",
    "such",
    "our",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "back",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "house",
    "use",
    "during",
    "without",
    "again",
    "place",
    "around",
    "however",
    "home",
    "small",
    "found",
    "thought",
    "went",
    "say",
    "part",
    "once",
    "general",
    "high",
    "upon",
    "school",
    "every",
    "don",
    "does",
    "got",
    "left",
    "number",
    "course",
    "war",
    "until",
    "always",
    "away",
    "something",
    "fact",
    "water",
    "though",
    "less",
    "public",
    "put",
    "think",
    "almost",
    "hand",
    "enough",
    "far",
    "took",
    "head",
    "yet",
    "system",
    "better",
    "set",
    "told",
    "nothing",
    "night",
    "end",
    "why",
    "called",
    "didn",
    "eyes",
    "find",
    "going",
    "look",
    "asked",
    "later",
    "point",
    "knew",
    "city",
    "next",
    "program",
    "business",
    "give",
    "group",
    "toward",
    "young",
    "days",
    "let",
    "room",
    "president",
    "side",
    "social",
    "given",
    "present",
    "several",
    "order",
    "national",
    "second",
    "possible",
    "rather",
    "per",
    "face",
    "among",
    "form",
    "often",
    "important",
    "things",
    "looked",
    "early",
    "white",
    "case",
    "large",
    "big",
];

fn words<R: Rng>(n: usize, rng: &mut R) -> String {
    let mut s = String::with_capacity(n * 6);
    for _ in 0..n {
        s.push(' ');
        s.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
    }
    s
}

fn around<R: Rng>(x: usize, ratio: f64, rng: &mut R) -> usize {
    if ratio <= 0.0 || x == 0 {
        return x.max(1);
    }
    let lo = ((x as f64) * (1.0 - ratio)).floor().max(1.0) as usize;
    let hi = ((x as f64) * (1.0 + ratio)).ceil() as usize;
    rng.gen_range(lo..=hi.max(lo))
}

/// Generates the workload; the same spec always yields the same conversations.
///
/// NOTE: the RNG seed mixes the seed with the workload's shape, so runs of different shapes
/// against one long-lived server never share prompt prefixes by accident (a prefix-caching
/// server would otherwise serve a later run's prompts from an earlier run's KV). Rerunning
/// the same command does repeat its prompts: change `--seed` between such runs.
pub fn generate(spec: &WorkloadSpec) -> Vec<Conversation> {
    let mut mix = spec.seed ^ 0x9e37_79b9_7f4a_7c15;
    for x in [
        spec.kind as u64,
        spec.input_tokens as u64,
        spec.output_tokens as u64,
        spec.prefix_tokens as u64,
        spec.num_requests as u64,
        spec.tool_tokens as u64,
        spec.records as u64,
    ] {
        mix = (mix ^ x).wrapping_mul(0x100_0000_01b3).rotate_left(17);
    }
    let mut rng = StdRng::seed_from_u64(mix);
    let n = spec.num_requests;
    let single = |append: String, max_tokens: usize, expected: Option<String>| Conversation {
        turns: vec![Turn {
            append,
            max_tokens,
            expected,
            schema: None,
        }],
    };
    match spec.kind {
        WorkloadKind::Random => (0..n)
            .map(|_| {
                let inp = around(spec.input_tokens, spec.range_ratio, &mut rng);
                let out = around(spec.output_tokens, spec.range_ratio, &mut rng);
                single(words(inp, &mut rng), out, None)
            })
            .collect(),
        WorkloadKind::SharedPrefix | WorkloadKind::SharedPrefixShuffled => {
            let k = spec.num_prefixes.max(1);
            let prefixes: Vec<String> = (0..k)
                .map(|i| {
                    format!(
                        "System prompt {i}. You are a helpful assistant.{}\n",
                        words(spec.prefix_tokens, &mut rng)
                    )
                })
                .collect();
            let mut order: Vec<usize> = (0..k).collect();
            (0..n)
                .map(|i| {
                    if spec.kind == WorkloadKind::SharedPrefixShuffled && i % k == 0 {
                        rand::seq::SliceRandom::shuffle(&mut order[..], &mut rng);
                    }
                    let inp = around(spec.input_tokens, spec.range_ratio, &mut rng);
                    let text = format!(
                        "{}User:{}\nAssistant:",
                        prefixes[order[i % k]],
                        words(inp, &mut rng)
                    );
                    single(text, spec.output_tokens, None)
                })
                .collect()
        }
        WorkloadKind::MultiTurn => {
            let turns = spec.turns.max(1);
            let tools = format!(
                "You are an agent. Tools: read_file(path), run(cmd), search(query).{}\n",
                words(spec.prefix_tokens, &mut rng)
            );
            let mut left = n;
            let mut out = Vec::new();
            while left > 0 {
                let t = turns.min(left);
                left -= t;
                let turns = (0..t)
                    .map(|j| {
                        let append = if j == 0 {
                            format!(
                                "{tools}User: task{}\nAssistant:",
                                words(spec.input_tokens, &mut rng)
                            )
                        } else {
                            format!(
                                "\nTool output:{}\nAssistant:",
                                words(spec.tool_tokens, &mut rng)
                            )
                        };
                        Turn {
                            append,
                            max_tokens: spec.output_tokens,
                            expected: None,
                            schema: None,
                        }
                    })
                    .collect();
                out.push(Conversation { turns });
            }
            out
        }
        WorkloadKind::Retrieval => (0..n)
            .map(|_| {
                let (text, answer) = retrieval_task(spec, &mut rng);
                single(text, spec.output_tokens, Some(answer))
            })
            .collect(),
        WorkloadKind::Json => (0..n)
            .map(|_| {
                let (text, schema) = json_task(spec, &mut rng);
                let mut c = single(text, spec.output_tokens, None);
                c.turns[0].schema = Some(schema);
                c
            })
            .collect(),
    }
}

/// A JSON task: a prompt of about `input_tokens` words asking for a record, and the
/// record's schema (two to four required properties, all bounded so that an answer fits a
/// modest token budget; no other properties).
pub fn json_task<R: Rng>(spec: &WorkloadSpec, rng: &mut R) -> (String, serde_json::Value) {
    use serde_json::json;
    const NAMES: &[&str] = &[
        "name", "city", "count", "score", "active", "tags", "color", "year", "level", "owner",
    ];
    let k = rng.gen_range(2..=4);
    let mut props = serde_json::Map::new();
    while props.len() < k {
        let name = NAMES[rng.gen_range(0..NAMES.len())];
        let p = match rng.gen_range(0..5) {
            0 => json!({"type": "string", "maxLength": rng.gen_range(4..16)}),
            1 => {
                let lo = rng.gen_range(-100i64..100);
                json!({"type": "integer", "minimum": lo, "maximum": lo + rng.gen_range(1..1000)})
            }
            2 => {
                let opts = ["red", "green", "blue", "small", "large"];
                json!({"enum": opts[..rng.gen_range(2..=opts.len())]})
            }
            3 => json!({"type": "boolean"}),
            _ => json!({"type": "array", "maxItems": rng.gen_range(1..4),
                        "items": {"type": "integer", "minimum": 0, "maximum": 99}}),
        };
        props.insert(name.to_string(), p);
    }
    let required: Vec<&String> = props.keys().collect();
    let schema = json!({
        "type": "object",
        "properties": props.clone(),
        "required": required,
        "additionalProperties": false,
    });
    let text = format!(
        "Context:{}\nReply with a JSON record with the fields {}.\n",
        words(spec.input_tokens, rng),
        props.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    (text, schema)
}

/// Whether `output` is a JSON document valid under `schema` (surrounding whitespace
/// allowed). A schema that does not compile grades every answer wrong.
pub fn grade_json(output: &str, schema: &serde_json::Value) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(output.trim()) else {
        return false;
    };
    jsonschema::is_valid(schema, &v)
}

/// Tokens one record line costs with per-digit tokenizers ("key", 4 digits, ":", 6 digits,
/// newline and spaces): used to size documents from `input_tokens`.
const TOKENS_PER_RECORD: usize = 14;

/// A retrieval document: a header line, then one record `key K: V` per line.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalDoc {
    pub text: String,
    /// Distinct four-digit keys, in document order.
    pub keys: Vec<usize>,
    /// Six-digit values (100000..=999999), `values[i]` belonging to `keys[i]`.
    pub values: Vec<u32>,
}

/// A document of `n` records (at most 9000, so keys stay four-digit and distinct).
pub fn retrieval_document<R: Rng>(n: usize, rng: &mut R) -> RetrievalDoc {
    let n = n.clamp(1, 9000);
    // Distinct four-digit keys: a shuffled window of 1000..10000.
    let start = rng.gen_range(1000..(10_000 - n).max(1001));
    let mut keys: Vec<usize> = (start..start + n).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.gen_range(0..=i));
    }
    let values: Vec<u32> = (0..n).map(|_| rng.gen_range(100_000..1_000_000)).collect();
    let mut text =
        String::from("Below is a list of records. Each line gives a key and its value.\n");
    for (k, v) in keys.iter().zip(&values) {
        text.push_str(&format!("key {k}: {v}\n"));
    }
    RetrievalDoc { text, keys, values }
}

/// The question appended to a document; the model completes the answer.
pub fn retrieval_question(key: usize) -> String {
    format!("\nQuestion: what is the value of key {key}?\nAnswer: the value of key {key} is")
}

/// Whether `output` answers with exactly `expected` (a retrieval value): some maximal run
/// of ASCII digits in it equals `expected`, and no run as long as `expected` or longer
/// differs from it. Surrounding text is fine ("The value is 123456."); a different
/// six-digit number, the digits inside a longer run (`1234567`, `0123456`), five of the six
/// digits, or the right number beside a wrong one are not. Shorter numbers (the four-digit
/// key repeated back) do not count against an answer.
pub fn grade(output: &str, expected: &str) -> bool {
    if expected.is_empty() {
        return false;
    }
    let mut found = false;
    for run in output
        .split(|c: char| !c.is_ascii_digit())
        .filter(|r| !r.is_empty())
    {
        if run == expected {
            found = true;
        } else if run.len() >= expected.len() {
            return false;
        }
    }
    found
}

/// A document of records and a question about one of them; returns (prompt, answer).
pub fn retrieval_task<R: Rng>(spec: &WorkloadSpec, rng: &mut R) -> (String, String) {
    let n = if spec.records > 0 {
        spec.records
    } else {
        (spec.input_tokens / TOKENS_PER_RECORD).max(2)
    };
    let doc = retrieval_document(n, rng);
    let q = rng.gen_range(0..doc.keys.len());
    (
        doc.text + &retrieval_question(doc.keys[q]),
        doc.values[q].to_string(),
    )
}
