//! `folio bench quality`: the quality study (DESIGN.md §compression). The fixed retrieval task set
//! ([`folio_bench::quality`]) against one in-process engine per configuration (KV storage
//! format × attention compute precision), or against OpenAI-compatible servers; prints the
//! right/wrong grid with the cells that differ from the first configuration marked, the
//! totals and the time to a correct answer; `--json` writes the result file that
//! `folio bench plot` draws as a grid.

use crate::engine_args::{AttnPrecisionArg, EngineArgs, NumericsArg};
use anyhow::{bail, Context, Result};
use clap::{Args, Parser, ValueEnum};
use folio_bench::client::{self, BaseUrl};
use folio_bench::quality::{self, Answer, Answerer, Ask, QualityConfig, QualityFile, StudyPlan};
use folio_engine::{EngineHandle, Event, FinishReason, GenerateRequest};
use folio_tokenizer::ChatMessage;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct QualityArgs {
    /// In-process engines: a local GGUF file or a catalogue model (`folio models`); with
    /// --base-url: the model id sent (default: the first `GET /v1/models` lists).
    #[arg(long)]
    pub model: Option<String>,
    /// KV storage formats, one engine each (a comma list); `K:V` sets the two apart
    /// (`q8_0:q4h`: keys q8_0, values q4h).
    #[arg(
        long,
        value_parser = crate::engine_args::kv_formats_parser,
        value_delimiter = ',',
        default_value = "f16,bf16,q8_0,q4_0"
    )]
    pub kv_format: Vec<folio_model::KvFormats>,
    /// K formats crossed with --kv-format-v (replaces --kv-format; with one side only,
    /// the other is the same format): `--kv-format-k q4h,q8_0 --kv-format-v q4h` runs q4h:q4h and q8_0:q4h.
    #[arg(long, value_parser = crate::engine_args::kv_format_parser(), value_delimiter = ',')]
    pub kv_format_k: Vec<folio_model::KvFormat>,
    /// V formats crossed with --kv-format-k.
    #[arg(long, value_parser = crate::engine_args::kv_format_parser(), value_delimiter = ',')]
    pub kv_format_v: Vec<folio_model::KvFormat>,
    /// Attention compute precisions crossed with the formats: kv (queries at the storage
    /// format's precision), f32 (f32 queries), f16 (f16 queries, the serving default).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "kv")]
    pub attn_precision: Vec<AttnPrecisionArg>,
    /// Records per document: one document per count.
    #[arg(long, value_delimiter = ',', default_value = "128,512")]
    pub records: Vec<usize>,
    /// Tasks in all, split evenly over the documents (one question each).
    #[arg(long, default_value_t = 8)]
    pub tasks: usize,
    /// Requests in flight (a comma list: each level asks every task).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub concurrency: Vec<usize>,
    /// Repetitions of every (task, concurrency) cell.
    #[arg(long, default_value_t = 2)]
    pub runs: usize,
    /// Extra attempts after a wrong answer (sampled at --retry-temperature, seeded).
    #[arg(long, default_value_t = 0)]
    pub retries: usize,
    #[arg(long, default_value_t = 0.7)]
    pub retry_temperature: f32,
    /// max_tokens per attempt (the answer is six digits; a completion stops at a newline).
    #[arg(long, default_value_t = 12)]
    pub max_tokens: usize,
    /// Seed of the documents and the retries' sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Ask through the chat template (one user message) instead of a plain completion.
    #[arg(long)]
    pub chat: bool,
    /// OpenAI-compatible servers instead of in-process engines, one configuration each.
    #[arg(long, value_delimiter = ',')]
    pub base_url: Vec<String>,
    /// Names of the --base-url configurations (default: the URLs).
    #[arg(long, value_delimiter = ',')]
    pub label: Vec<String>,
    /// KV cache memory of each in-process engine (suffixes k, m, g).
    #[arg(long, default_value = "1g")]
    pub kv_cache_bytes: String,
    #[arg(long, value_enum, default_value = "fast")]
    pub numerics: NumericsArg,
    /// Longest wait for one server response, seconds.
    #[arg(long, default_value_t = 900.0)]
    pub timeout_s: f64,
    /// Write the result file here (`folio bench plot` draws its grid).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl QualityArgs {
    /// The (K, V) formats of the in-process configurations, in order: the crossing of
    /// --kv-format-k and --kv-format-v when either is given, else --kv-format.
    pub fn kv_pairs(&self) -> Vec<folio_model::KvFormats> {
        let (ks, vs) = match (self.kv_format_k.is_empty(), self.kv_format_v.is_empty()) {
            (true, true) => return self.kv_format.clone(),
            // One side only: the other in the same format.
            (false, true) => return self.kv_format_k.iter().map(|&f| f.into()).collect(),
            (true, false) => return self.kv_format_v.iter().map(|&f| f.into()).collect(),
            (false, false) => (&self.kv_format_k, &self.kv_format_v),
        };
        let mut out = Vec::new();
        for &k in ks {
            for &v in vs {
                out.push(folio_model::KvFormats { k, v });
            }
        }
        out
    }
}

/// Engine flags at their defaults (the same defaults `folio serve` has).
fn default_engine_args() -> EngineArgs {
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        engine: EngineArgs,
    }
    Wrap::parse_from(["folio"]).engine
}

/// An in-process engine as an [`Answerer`].
pub struct EngineAnswerer {
    pub h: EngineHandle,
    pub chat: bool,
}

impl Answerer for EngineAnswerer {
    fn answer(&self, ask: &Ask) -> folio_bench::Result<Answer> {
        self.ask(ask)
            .map_err(|e| folio_bench::BenchError::Failed(format!("{e:#}")))
    }
}

impl EngineAnswerer {
    fn ask(&self, ask: &Ask) -> Result<Answer> {
        let tok = &self.h.tokenizer;
        let ids = if self.chat {
            let text = tok.apply_chat_template(&[ChatMessage::new("user", ask.prompt)], true)?;
            let mut ids = tok.encode(&text, true)?;
            if let Some(bos) = tok.bos_id() {
                if ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
                    ids.remove(0);
                }
            }
            ids
        } else {
            tok.encode(ask.prompt, true)?
        };
        let mut req = GenerateRequest::new(ids, ask.max_tokens);
        req.params.temperature = ask.temperature;
        req.params.seed = ask.seed;
        if !self.chat {
            req.stop = vec!["\n".into()];
        }
        let t0 = Instant::now();
        let mut s = self.h.submit(req)?;
        let mut text = String::new();
        while let Some(ev) = s.next_blocking() {
            match ev {
                Event::Tokens { text: t, .. } => text.push_str(&t),
                // Generation streams carry no embedding.
                Event::Embedding { .. } => {}
                Event::Finished { reason, usage, at } => {
                    match reason {
                        FinishReason::Error(m) => bail!("engine: {m}"),
                        FinishReason::Rejected(r) => bail!("engine: {r}"),
                        _ => {}
                    }
                    return Ok(Answer {
                        text,
                        output_tokens: usage.completion_tokens as u64,
                        prompt_tokens: usage.prompt_tokens as u64,
                        cached_tokens: usage.cached_tokens as u64,
                        seconds: (at - t0).as_secs_f64(),
                    });
                }
            }
        }
        bail!("engine: the stream ended without Finished")
    }
}

/// An OpenAI-compatible server as an [`Answerer`] (one non-streamed request per answer).
pub struct HttpAnswerer {
    pub base: BaseUrl,
    pub model: String,
    pub chat: bool,
    pub timeout: Duration,
}

impl HttpAnswerer {
    async fn post(&self, ask: &Ask<'_>) -> Result<Answer> {
        let (path, mut body) = if self.chat {
            (
                "/v1/chat/completions",
                json!({"model": self.model, "messages": [{"role": "user", "content": ask.prompt}]}),
            )
        } else {
            (
                "/v1/completions",
                json!({"model": self.model, "prompt": ask.prompt, "stop": ["\n"]}),
            )
        };
        body["max_tokens"] = json!(ask.max_tokens);
        body["temperature"] = json!(ask.temperature);
        if let Some(s) = ask.seed {
            // OpenAI seeds are signed 64-bit integers: the same bits, reinterpreted (folio's
            // server maps them back).
            body["seed"] = json!(s as i64);
        }
        let t0 = Instant::now();
        let body = body.to_string();
        let resp = client::send(&self.base, "POST", path, body.as_bytes(), self.timeout).await?;
        let status = resp.head.status;
        let text = resp.text(self.timeout).await?;
        let seconds = t0.elapsed().as_secs_f64();
        if status != 200 {
            bail!(
                "HTTP {status}: {}",
                text.chars().take(300).collect::<String>()
            );
        }
        let v: Value = serde_json::from_str(&text).context("response is not JSON")?;
        let c = &v["choices"][0];
        let out = c["text"]
            .as_str()
            .or_else(|| c["message"]["content"].as_str())
            .unwrap_or("");
        let u = &v["usage"];
        Ok(Answer {
            text: out.to_string(),
            output_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
            prompt_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
            cached_tokens: u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0),
            seconds,
        })
    }
}

impl Answerer for HttpAnswerer {
    fn answer(&self, ask: &Ask) -> folio_bench::Result<Answer> {
        self.ask(ask)
            .map_err(|e| folio_bench::BenchError::Failed(format!("{e:#}")))
    }
}

impl HttpAnswerer {
    fn ask(&self, ask: &Ask) -> Result<Answer> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting a tokio runtime")?
            .block_on(self.post(ask))
    }
}

fn value_name<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map_or("?".into(), |p| p.get_name().to_string())
}

/// `folio bench quality`.
pub fn run(a: QualityArgs) -> Result<()> {
    if a.records.is_empty() || a.records.contains(&0) || a.tasks == 0 || a.runs == 0 {
        bail!("--records (each ≥ 1), --tasks and --runs must be positive");
    }
    if a.concurrency.is_empty() || a.concurrency.contains(&0) {
        bail!("--concurrency: each level must be ≥ 1");
    }
    let tasks = quality::tasks(&a.records, a.tasks, a.seed);
    let plan = StudyPlan {
        concurrency: a.concurrency.clone(),
        runs: a.runs,
        retries: a.retries,
        max_tokens: a.max_tokens.max(1),
        retry_temperature: a.retry_temperature,
        seed: a.seed,
    };
    let path = if a.base_url.is_empty() {
        let model = a.model.as_deref().map(std::path::Path::new);
        Some(folio_fetch::resolve_model_or_list(model)?)
    } else {
        None
    };
    let model_name = match (&path, &a.model) {
        (Some(p), _) => p
            .file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
        (None, Some(m)) => m.clone(),
        (None, None) => {
            let first = BaseUrl::parse(&a.base_url[0])?;
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(folio_bench::runner::detect_model(&first))
                .unwrap_or_else(|| "default".into())
        }
    };
    let mut file = QualityFile {
        kind: "quality".into(),
        model: model_name.clone(),
        seed: a.seed,
        records: a.records.clone(),
        concurrency: a.concurrency.clone(),
        runs: a.runs,
        retries: a.retries,
        max_tokens: plan.max_tokens,
        retry_temperature: a.retry_temperature,
        baseline: String::new(),
        tasks,
        configs: Vec::new(),
    };
    // The result file is rewritten after every configuration, so a study cut short keeps
    // the configurations it finished.
    let save = |file: &mut QualityFile, cfg: QualityConfig| -> Result<()> {
        eprintln!("[{}] wall {:.1} s", cfg.label, cfg.wall_s);
        file.configs.push(cfg);
        file.finish();
        if let Some(p) = &a.json {
            std::fs::write(p, serde_json::to_string_pretty(file)?)
                .with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(())
    };
    if let Some(path) = &path {
        for kv in a.kv_pairs() {
            for p in &a.attn_precision {
                let label = format!(
                    "{}/{}",
                    folio_bench::inproc::model::kv_label(kv),
                    value_name(p)
                );
                let mut e = default_engine_args();
                e.model = vec![path.clone()];
                (e.kv_format_k, e.kv_format_v) = (Some(kv.k), Some(kv.v));
                e.attn_precision = *p;
                e.kv_cache_bytes = a.kv_cache_bytes.clone();
                e.numerics = a.numerics;
                let t0 = Instant::now();
                let h = e.start()?;
                let start_s = t0.elapsed().as_secs_f64();
                eprintln!("[{label}] engine started in {start_s:.1} s");
                let answerer = EngineAnswerer {
                    h: h.clone(),
                    chat: a.chat,
                };
                let run = quality::run_config(&answerer, &file.tasks, &plan, &|l| {
                    eprintln!("[{label}] {l}")
                });
                h.shutdown();
                let mut cfg = QualityConfig::new(label.clone(), run?, start_s);
                cfg.kv_format = Some(kv.name().to_string());
                cfg.attn_precision = Some(value_name(p));
                save(&mut file, cfg)?;
            }
        }
    } else {
        for (i, url) in a.base_url.iter().enumerate() {
            let label = a.label.get(i).cloned().unwrap_or_else(|| url.clone());
            let answerer = HttpAnswerer {
                base: BaseUrl::parse(url)?,
                model: model_name.clone(),
                chat: a.chat,
                timeout: Duration::from_secs_f64(a.timeout_s.max(1.0)),
            };
            let run = quality::run_config(&answerer, &file.tasks, &plan, &|l| {
                eprintln!("[{label}] {l}")
            })?;
            let mut cfg = QualityConfig::new(label.clone(), run, 0.0);
            cfg.base_url = Some(url.clone());
            save(&mut file, cfg)?;
        }
    }
    print!("{}", file.table());
    if let Some(p) = &a.json {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Greedy answers (and seeded retries) of the small default model are the same one
    /// request at a time and four at once: batching never changes an answer.
    #[test]
    fn quality_answers_are_the_same_at_concurrency_1_and_4() {
        let h = default_engine_args()
            .start()
            .expect("engine on the default model");
        let a = EngineAnswerer {
            h: h.clone(),
            chat: false,
        };
        let tasks = quality::tasks(&[40, 80], 8, 5);
        let plan = StudyPlan {
            concurrency: vec![1, 4],
            runs: 1,
            retries: 1,
            max_tokens: 8,
            retry_temperature: 0.7,
            seed: 1,
        };
        let run = quality::run_config(&a, &tasks, &plan, &|_| {}).expect("run");
        h.shutdown();
        assert_eq!(run.cells.len(), 16);
        for t in &tasks {
            let cells: Vec<_> = run.cells.iter().filter(|c| c.task == t.id).collect();
            let texts = |i: usize| -> Vec<&str> {
                cells[i].attempts.iter().map(|a| a.text.as_str()).collect()
            };
            assert_eq!((cells[0].concurrency, cells[1].concurrency), (1, 4));
            assert_eq!(texts(0), texts(1), "{}", t.id);
            assert!(cells[0].attempts.iter().all(|a| a.error.is_none()));
            assert!(cells[0].attempts[0].output_tokens > 0);
        }
        // The warm-up cached each document: every graded prompt hit the prefix cache.
        assert!(run
            .cells
            .iter()
            .all(|c| c.attempts[0].cached_tokens * 2 > c.attempts[0].prompt_tokens));
        let totals = quality::Totals::of(&tasks, &run.cells);
        assert!(
            totals.unstable_tasks.is_empty(),
            "{:?}",
            totals.unstable_tasks
        );
    }

    /// Through `folio serve`'s HTTP API (`--base-url`) the same tasks get the same answers,
    /// retries (seeded sampling) included, and the server's usage is read back.
    #[test]
    fn http_answers_equal_in_process_answers() {
        let h = default_engine_args()
            .start()
            .expect("engine on the default model");
        let server = folio_testkit::http::start(h.clone(), folio_server::ServerOptions::default());
        let addr = server.addr;
        let tasks = quality::tasks(&[40], 4, 9);
        let plan = StudyPlan {
            concurrency: vec![2],
            runs: 1,
            retries: 1,
            max_tokens: 8,
            retry_temperature: 0.7,
            seed: 2,
        };
        let http = HttpAnswerer {
            base: BaseUrl::parse(&format!("http://{addr}")).expect("url"),
            // The served name (the server answers 404 for any other model id).
            model: h.info.model_name.clone(),
            chat: false,
            timeout: Duration::from_secs(120),
        };
        let over_http = quality::run_config(&http, &tasks, &plan, &|_| {}).expect("http run");
        let local = EngineAnswerer {
            h: h.clone(),
            chat: false,
        };
        let in_process = quality::run_config(&local, &tasks, &plan, &|_| {}).expect("run");
        if let Some(stop) = server.stop.lock().expect("stop").take() {
            let _ = stop.send(());
        }
        server
            .stopped
            .lock()
            .expect("stopped")
            .recv()
            .expect("server thread")
            .expect("server");
        h.shutdown();
        assert_eq!(over_http.cells.len(), 4);
        for (a, b) in over_http.cells.iter().zip(&in_process.cells) {
            let texts = |c: &quality::Cell| {
                c.attempts
                    .iter()
                    .map(|a| a.text.clone())
                    .collect::<Vec<_>>()
            };
            assert_eq!(texts(a), texts(b), "{}", a.task);
            assert!(a.attempts.iter().all(|x| x.error.is_none()), "{a:?}");
            let (x, y) = (&a.attempts[0], &b.attempts[0]);
            assert_eq!(
                (x.prompt_tokens, x.output_tokens),
                (y.prompt_tokens, y.output_tokens)
            );
        }
    }
}
