//! The generation endpoints: validate → tokenize → submit n requests per prompt → stream
//! SSE or collect one response.

use crate::api::Api;
use crate::api::EchoPrompt;
use crate::api::PromptInput;
use crate::api::{new_id, unix_now};
use crate::chat_sink::ChatSink;
use crate::choices::Choices;
use crate::cutoff::{until, Cutoff};
use crate::error::ApiError;
use crate::fields::Fields;
use crate::openai::Job;
use crate::params;
use crate::prompt;
use crate::running::Running;
use crate::state::AppState;
use axum::response::Response;
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
    let req = start(st, api, body, arrival).await?;
    let sink = ChatSink::new(&req.job, req.choices.count());
    let warning = crate::known_fields::warning(&req.ignored);
    let mut r = req.drive(sink).await?;
    if let Some(w) = warning.and_then(|w| axum::http::HeaderValue::from_str(&w).ok()) {
        r.headers_mut().insert(axum::http::header::WARNING, w);
    }
    Ok(r)
}

/// Everything up to the answer: validate, tokenize, submit `n` engine requests per
/// prompt, and wait for admission (streams only briefly). /v1/responses comes through
/// here too, with its body already in chat form.
pub async fn start(
    st: AppState,
    api: Api,
    mut body: Map<String, Value>,
    arrival: Instant,
) -> Result<Running, ApiError> {
    let s = &st.0;
    st.refuse_if_draining()?;
    let mut ignored = crate::known_fields::check(&body, api)?;
    // The prompt leaves the body (moved, not copied: it may be megabytes); no other field
    // reader looks at it.
    let prompt_field = body.remove(match api {
        Api::Completions => "prompt",
        Api::Chat => "messages",
    });
    let f = Fields::new(&body);
    // The model (loaded now if it is not), held until the answer ends.
    let m = st.lease(crate::lora::model_field(&f)?).await?;
    let info = &m.engine.info;
    let cap = m.capacity();
    // The base model or adapters (a `model` naming one, or a `lora` list).
    if api == Api::Chat
        && body.get("reasoning_effort").is_some_and(|v| !v.is_null())
        && !m
            .engine
            .tokenizer
            .chat_template()
            .is_some_and(|t| t.contains("reasoning_effort"))
    {
        ignored.push("reasoning_effort");
    }
    if !ignored.is_empty() {
        tracing::info!(fields = ?ignored, "accepted and ignored request fields");
    }
    let (lora, model_name) = crate::lora::request_adapters(&m, &f)?;
    let mut p = params::parse(&f, api, m.limits(s.opts.max_n))?;
    p.sampling.rules = p.logit.rules(&m.engine.tokenizer)?;
    crate::sampler_fields::resolve(&mut p.sampling, &p.dry_breakers, &m.engine.tokenizer);
    let template = m.engine.tokenizer.chat_template();
    let tool_parser = s
        .opts
        .tool_call_parser
        .as_deref()
        .and_then(crate::tool_parse::Parser::from_name)
        .unwrap_or_else(|| crate::tool_parse::Parser::for_template(template.unwrap_or("")));
    // `tool_choice` required or named: the answer is constrained to one such call; `auto`
    // with a strict tool: the calls the model opens are (when nothing else constrains).
    if let Some(c) = match &p.tools {
        Some(t) if p.constraint.is_none() => t.lazy_calls(tool_parser)?,
        _ => None,
    } {
        p.constraint = Some(crate::constraint::Structured {
            field: "tools".into(),
            constraint: c,
        });
    }
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
        Some(c) => Some(s.compiler.compile(&m.engine.grammars, c).await?),
        None => None,
    };
    let mut inputs = match api {
        Api::Chat => vec![prompt::chat_prompt(prompt_field, &f)?],
        Api::Completions => prompt::completion_prompts(prompt_field, info.vocab_size)?,
    };
    let tool_calling = match &p.tools {
        Some(t) if !t.offered().is_empty() => {
            crate::tools::render_into(&mut inputs[0], t, template);
            Some(crate::tools::ToolCalling {
                parser: tool_parser,
                parallel: t.parallel,
            })
        }
        Some(t) => {
            crate::tools::render_into(&mut inputs[0], t, template);
            crate::tools::harmony_chat(api, tool_parser)
        }
        None => crate::tools::harmony_chat(api, tool_parser),
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
    let prompts = tokenize_all(&st, &m, api, inputs, cap).await?;
    let echo: Vec<EchoPrompt> = if p.echo {
        prompts
            .iter()
            .zip(echo_texts)
            .map(|(ids, t)| EchoPrompt {
                text: t.unwrap_or_else(|| m.engine.tokenizer.decode(ids, false)),
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
        max_tokens.push(cap.max_tokens(
            p.max_tokens,
            field,
            ids.len(),
            s.opts.default_max_tokens,
        )?);
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
            special_text: tool_calling.is_some_and(|tc| tc.parser.special_markers()),
        };
        // n samples of one prompt share its KV: the engine computes the prompt once and
        // forks the other samples from it.
        let params: Vec<_> = (0..p.n).map(|j| p.sampling_for(j)).collect();
        match m.engine.submit_n(req, params) {
            Ok(rs) => streams.extend(rs),
            Err(e) => return Err(st.submit_failed(&m.engine, &streams, e)),
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
        continuous_usage: p.stream && p.continuous_usage,
        arrival,
        echo,
        tools: tool_calling,
        reasoning: match api {
            Api::Chat => s.opts.reasoning(),
            Api::Completions => None,
        },
    };
    let mut choices = Choices::new(streams, Some(m.engine.clone())).counting_aborts(m.served());
    let deadline = Cutoff::earliest(s.opts.request_timeout, p.deadline_ms, arrival);
    // Streams wait for admission only briefly: a request queued behind others gets its
    // headers (and keep-alive comments) instead of silence until its first token.
    let wait = p.stream.then_some(s.opts.admission_wait);
    let admitted = admit(&mut choices, wait, deadline.map(|c| c.at))
        .await
        .map_err(|reason| st.refused(reason))?;
    Ok(Running {
        st: st.clone(),
        job,
        choices,
        deadline,
        queued: (!admitted).then_some(queued),
        _active: active,
        ignored,
        model: m,
    })
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
    m: &crate::models::Served,
    api: Api,
    inputs: Vec<PromptInput>,
    cap: crate::capacity::Capacity,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let tok = m.engine.tokenizer.clone();
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
