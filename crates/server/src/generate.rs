//! The generation endpoints: validate → tokenize → submit n requests per prompt → stream
//! SSE or collect one response.

use crate::choice_state::{usage_sum, ChoiceState};
use crate::choices::Choices;
use crate::echo::EchoPrompt;
use crate::error::ApiError;
use crate::fields::Fields;
use crate::openai::{new_id, unix_now, Job};
use crate::params::{self, Api};
use crate::prompt::{self, PromptInput};
use crate::sse;
use crate::state::{AppState, Slots};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use folio_engine::{FinishReason, GenerateRequest, RequestStream};
use serde_json::{Map, Value};
use std::time::{Duration, Instant};

/// Handles one /v1/completions or /v1/chat/completions body.
pub async fn generate(
    st: AppState,
    api: Api,
    body: Map<String, Value>,
    arrival: Instant,
) -> Result<Response, ApiError> {
    let started = start(st, api, body, arrival).await?;
    if started.req.job.stream {
        Ok(sse::respond(started.req, started.queued))
    } else {
        drop(started.queued);
        collect(started.req).await
    }
}

/// A request the engine took: who answers it, and (a stream not yet admitted) its queue
/// places, held until its first event.
pub struct Started {
    pub req: Running,
    pub queued: Option<Slots>,
}

/// Everything up to the answer: validate, tokenize, submit `n` engine requests per
/// prompt, and wait for admission (streams only briefly). /v1/responses comes through
/// here too, with its body already in chat form.
pub async fn start(
    st: AppState,
    api: Api,
    mut body: Map<String, Value>,
    arrival: Instant,
) -> Result<Started, ApiError> {
    let s = &st.0;
    st.refuse_if_draining()?;
    let info = &s.engine.info;
    let cap = st.capacity();
    crate::known_fields::check(&body, api)?;
    // The prompt leaves the body (moved, not copied: it may be megabytes); no other field
    // reader looks at it.
    let prompt_field = body.remove(match api {
        Api::Completions => "prompt",
        Api::Chat => "messages",
    });
    let f = Fields::new(&body);
    // The base model or adapters (a `model` naming one, or a `lora` list).
    let (lora, model_name) = crate::lora::request_adapters(&st, &f)?;
    let mut p = params::parse(&f, api, st.limits())?;
    p.sampling.rules = p.logit.rules(&s.engine.tokenizer)?;
    // `tool_choice` required or named: the answer is constrained to one such call.
    if let Some(schema) = p.tools.as_ref().and_then(|t| t.forced_call_schema()) {
        if let Some(c) = &p.constraint {
            return Err(ApiError::param(
                "tool_choice",
                format!(
                    "a required or named tool call cannot be combined with {}",
                    c.field
                ),
            ));
        }
        p.constraint = Some(crate::constraint::Structured {
            field: "tool_choice".into(),
            constraint: folio_engine::Constraint::JsonSchema(schema),
        });
    }
    let compiled = match &p.constraint {
        Some(c) => Some(s.compiler.compile(&s.engine.grammars, c).await?),
        None => None,
    };
    let mut inputs = match api {
        Api::Chat => vec![prompt::chat_prompt(prompt_field, &f)?],
        Api::Completions => prompt::completion_prompts(prompt_field, info.vocab_size)?,
    };
    let tool_calling = match &p.tools {
        Some(t) if !t.offered().is_empty() => {
            let template = s.engine.tokenizer.chat_template();
            crate::tools::render_into(&mut inputs[0], t, template);
            let parser = s
                .opts
                .tool_call_parser
                .as_deref()
                .and_then(crate::tool_parse::Parser::from_name)
                .unwrap_or_else(|| crate::tool_parse::Parser::for_template(template.unwrap_or("")));
            Some(crate::tools::ToolCalling {
                parser,
                parallel: t.parallel,
            })
        }
        Some(t) => {
            crate::tools::render_into(&mut inputs[0], t, s.engine.tokenizer.chat_template());
            None
        }
        None => None,
    };
    let echo_texts: Vec<Option<String>> = if p.echo {
        inputs
            .iter()
            .map(|i| match i {
                PromptInput::Text(t) => Some(t.clone()),
                _ => None,
            })
            .collect()
    } else {
        Vec::new()
    };
    let prompts = tokenize_all(&st, api, inputs, cap).await?;
    let echo: Vec<EchoPrompt> = if p.echo {
        prompts
            .iter()
            .zip(echo_texts)
            .map(|(ids, t)| EchoPrompt {
                text: t.unwrap_or_else(|| s.engine.tokenizer.decode(ids, false)),
                ids: ids.clone(),
            })
            .collect()
    } else {
        Vec::new()
    };
    let fields: Vec<String> = (0..prompts.len())
        .map(|i| field_name(api, i, prompts.len()))
        .collect();
    let mut max_tokens = Vec::with_capacity(prompts.len());
    for (ids, field) in prompts.iter().zip(&fields) {
        cap.check_prompt(field, ids.len())?;
        max_tokens.push(cap.max_tokens(p.max_tokens, ids.len(), s.opts.default_max_tokens)?);
    }

    let active = st.begin();
    let queued = st.reserve(prompts.len() * p.n)?;
    let mut streams: Vec<RequestStream> = Vec::with_capacity(prompts.len() * p.n);
    for (ids, &max) in prompts.iter().zip(&max_tokens) {
        let req = GenerateRequest {
            prompt: ids.clone(),
            params: p.sampling_for(0),
            max_tokens: max,
            stop: p.stop.clone(),
            stop_token_ids: p.stop_token_ids.clone(),
            ignore_eos: p.ignore_eos,
            logprobs: p.logprobs,
            deadline: p.deadline_ms.map(|d| arrival + Duration::from_millis(d)),
            arrival: Some(arrival),
            spec: p.spec,
            spec_tokens: p.spec_tokens,
            lora: lora.clone(),
            constraint: compiled.clone(),
            // Echo with logprobs scores the prompt; max_tokens 0 runs as score-only.
            prompt_logprobs: if (p.echo && p.logprobs.is_some()) || max.is_score_only() {
                Some(p.logprobs.unwrap_or(0))
            } else {
                None
            },
            embed: None,
        };
        // n samples of one prompt share its KV: the engine computes the prompt once and
        // forks the other samples from it.
        let params: Vec<_> = (0..p.n).map(|j| p.sampling_for(j)).collect();
        match s.engine.submit_n(req, params) {
            Ok(rs) => streams.extend(rs),
            Err(e) => {
                for rs in &streams {
                    s.engine.abort(rs.id);
                }
                let e = ApiError::from(e);
                s.metrics.rejected(e.status.as_u16());
                return Err(e);
            }
        }
    }
    let job = Job {
        api,
        id: new_id(api),
        created: unix_now(),
        model: model_name,
        n: p.n,
        prompt_lens: prompts.iter().map(Vec::len).collect(),
        logprobs: p.logprobs,
        stream: p.stream,
        include_usage: p.include_usage,
        arrival,
        echo,
        tools: tool_calling,
        reasoning: match api {
            Api::Chat => s.opts.reasoning(),
            Api::Completions => None,
        },
    };
    let mut choices = Choices::new(streams, Some(s.engine.clone())).counting_aborts(st.clone());
    let deadline = Cutoff::earliest(s.opts.request_timeout, p.deadline_ms, arrival);
    // Streams wait for admission only briefly: a request queued behind others gets its
    // headers (and keep-alive comments) instead of silence until its first token.
    let wait = p.stream.then_some(s.opts.admission_wait);
    let admitted = match admit(&mut choices, wait, deadline.map(|c| c.at)).await {
        Ok(a) => a,
        Err(reason) => {
            let e = refusal(reason);
            s.metrics.rejected(e.status.as_u16());
            return Err(e);
        }
    };
    let queued = (!admitted).then_some(queued);
    let req = Running {
        st: st.clone(),
        job,
        choices,
        deadline,
        _active: active,
    };
    Ok(Started { req, queued })
}

/// One generation request after submission, owned by whoever answers it.
pub struct Running {
    pub st: AppState,
    pub job: Job,
    pub choices: Choices,
    /// When the server ends it (request timeout or `deadline_ms`), and with which reason.
    pub deadline: Option<Cutoff>,
    /// Counts the request as in flight (the drain waits for it).
    pub _active: Slots,
}

/// When the server ends a request that is still running, and the finish reason its
/// unfinished choices then get. The request timeout and `deadline_ms` are one mechanism:
/// at the earlier of the two, `Choices::abort` aborts the engine requests (freeing their
/// KV) and the text so far is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cutoff {
    pub at: Instant,
    /// `timeout` or `deadline`.
    pub reason: &'static str,
}

impl Cutoff {
    /// The earlier of the server's request timeout and the request's `deadline_ms`, both
    /// counted from `arrival` (on a tie, the request's own deadline names it).
    pub fn earliest(
        timeout: Option<Duration>,
        deadline_ms: Option<u64>,
        arrival: Instant,
    ) -> Option<Cutoff> {
        let timeout = timeout.map(|t| Cutoff {
            at: arrival + t,
            reason: crate::choice_state::TIMEOUT,
        });
        let deadline = deadline_ms.map(|ms| Cutoff {
            at: arrival + Duration::from_millis(ms),
            reason: crate::choice_state::DEADLINE,
        });
        match (timeout, deadline) {
            (Some(t), Some(d)) => Some(if t.at < d.at { t } else { d }),
            (t, d) => d.or(t),
        }
    }
}

/// Waits until the engine admitted every choice (its first event), at most `wait` and
/// never past `deadline`: `Ok(true)` admitted, `Ok(false)` still waiting, `Err` refused.
pub async fn admit(
    choices: &mut Choices,
    wait: Option<Duration>,
    deadline: Option<Instant>,
) -> Result<bool, FinishReason> {
    let limit = async {
        match wait {
            Some(w) => tokio::time::sleep(w).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = choices.admitted() => r.map(|()| true),
        _ = limit => Ok(false),
        _ = until(deadline) => Ok(false),
    }
}

/// Resolves at `deadline`; never without one.
pub async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// The HTTP answer to a request the engine refused before its first token.
pub fn refusal(reason: FinishReason) -> ApiError {
    match reason {
        FinishReason::Rejected(m) => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("request rejected: {m}"),
            "overloaded",
        ),
        FinishReason::ShuttingDown => ApiError::shutting_down(),
        FinishReason::Error(m) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("generation failed: {m}"),
            "generation_failed",
        ),
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("unexpected end: {}", other.as_openai()),
            "internal",
        ),
    }
}

fn field_name(api: Api, i: usize, count: usize) -> String {
    match api {
        Api::Chat => "messages".into(),
        Api::Completions if count == 1 => "prompt".into(),
        Api::Completions => format!("prompt[{i}]"),
    }
}

/// Tokenizes off the async threads (a 4 MiB prompt takes a while), one large job per core.
/// Text that can never fit is refused first, from its length, without a turn or any
/// tokenizing.
async fn tokenize_all(
    st: &AppState,
    api: Api,
    inputs: Vec<PromptInput>,
    cap: crate::capacity::Capacity,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let tok = st.0.engine.tokenizer.clone();
    let count = inputs.len();
    for (i, input) in inputs.iter().enumerate() {
        if let PromptInput::Text(t) = input {
            prompt::check_text(&tok, t, &field_name(api, i, count), &cap)?;
        }
    }
    let turn = st.prompt_permit(prompt::text_bytes(&inputs)).await;
    // The turn moves into the task: it is held until tokenizing ends, also when the
    // client goes away meanwhile.
    tokio::task::spawn_blocking(move || {
        let _turn = turn;
        inputs
            .iter()
            .enumerate()
            .map(|(i, input)| prompt::tokenize(&tok, input, &field_name(api, i, count), &cap))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(ApiError::tokenizer_task)?
}

/// Waits for every choice and answers with one JSON response. If the client goes away,
/// this future is dropped and with it `choices`, which aborts the requests.
async fn collect(req: Running) -> Result<Response, ApiError> {
    let Running {
        st,
        job,
        mut choices,
        deadline,
        ..
    } = req;
    let s = &st.0;
    let tok = &s.engine.tokenizer;
    let mut states = vec![ChoiceState::default(); choices.count()];
    loop {
        let next = tokio::select! {
            biased;
            _ = until(deadline.map(|c| c.at)) => {
                let reason = deadline.map_or(crate::choice_state::TIMEOUT, |c| c.reason);
                for i in choices.abort() {
                    states[i].cut_off(reason, &s.metrics);
                }
                break;
            }
            next = choices.next() => next,
        };
        let Some((i, ev)) = next else { break };
        states[i].apply(i, ev, &job, tok, &s.metrics);
    }
    log_finished(&job, &states, "complete");
    if let Some(FinishReason::Error(m)) = states.iter().find_map(|c| {
        c.finish
            .clone()
            .filter(|f| matches!(f, FinishReason::Error(_)))
    }) {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("generation failed: {m}"),
            "generation_failed",
        ));
    }
    let usage = usage_sum(&job, &states);
    let out = states
        .iter_mut()
        .enumerate()
        .map(|(i, c)| match job.echo.get(i / job.n) {
            Some(e) => {
                let lp = job
                    .logprobs
                    .map(|_| crate::echo::logprobs(tok, e, &c.prompt_logprobs, &c.logprobs));
                (crate::echo::text(e, &c.text), lp, c.finish_reason())
            }
            None => {
                let lp = c.final_logprobs(&job, tok);
                (std::mem::take(&mut c.text), lp, c.finish_reason())
            }
        })
        .collect();
    let mut v = job.response(out, usage);
    if let Some(p) = job.reasoning {
        crate::reasoning::split_response(&mut v, p);
    }
    if let Some(tc) = job.tools {
        crate::tools::rewrite_response(&mut v, tc);
    }
    Ok(axum::Json(v).into_response())
}

/// The one structured log line per request.
pub fn log_finished(job: &Job, states: &[ChoiceState], outcome: &str) {
    let u = usage_sum(job, states);
    let ttft_ms = states
        .iter()
        .filter_map(|c| c.first_at)
        .min()
        .map(|t| t.saturating_duration_since(job.arrival).as_secs_f64() * 1e3);
    let reasons: Vec<&str> = states.iter().map(ChoiceState::finish_reason).collect();
    tracing::info!(
        id = %job.id,
        stream = job.stream,
        choices = states.len(),
        prompt_tokens = u.prompt_tokens,
        completion_tokens = u.completion_tokens,
        cached_tokens = u.cached_tokens,
        ttft_ms = ttft_ms.unwrap_or(f64::NAN),
        e2e_ms = job.arrival.elapsed().as_secs_f64() * 1e3,
        finish_reason = %reasons.join(","),
        outcome,
        "request finished"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earlier_cutoff_names_the_finish_reason() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(Cutoff::earliest(None, None, t0), None);
        let c = Cutoff::earliest(Some(s(10)), None, t0).unwrap();
        assert_eq!((c.at, c.reason), (t0 + s(10), "timeout"));
        let c = Cutoff::earliest(None, Some(500), t0).unwrap();
        assert_eq!(
            (c.at, c.reason),
            (t0 + Duration::from_millis(500), "deadline")
        );
        let c = Cutoff::earliest(Some(s(10)), Some(500), t0).unwrap();
        assert_eq!(c.reason, "deadline");
        let c = Cutoff::earliest(Some(s(1)), Some(5000), t0).unwrap();
        assert_eq!((c.at, c.reason), (t0 + s(1), "timeout"));
        assert_eq!(
            Cutoff::earliest(Some(s(1)), Some(1000), t0).unwrap().reason,
            "deadline"
        );
    }
}
