//! folio-server: the OpenAI-compatible HTTP front door of a folio engine.
//!
//! # Layout
//!
//! - [`router`] / [`serve`]: the axum routes, graceful shutdown on SIGINT/SIGTERM.
//! - `transport`: the accept loop (TCP_NODELAY, connection cap, header/idle timeouts).
//! - `auth`: `--api-key` bearer check and `--allowed-origins` CORS.
//! - `guard`: what another site's page can make a browser send: the Host allow-list
//!   (DNS rebinding, `--allowed-hosts`) and JSON-only POSTs (415, `--allow-any-content-type`).
//! - `capacity`: what one request can use (context vs. KV pool): `max_model_len`, prompt
//!   and `max_tokens` checks.
//! - `routes`: handlers; `generate`: validate → tokenize → submit n → stream or collect.
//! - `body` + `fields`: JSON bodies read field by field; errors name field, limit and value.
//! - `constraint`: structured-output fields (`response_format`, `structured_outputs`,
//!   `guided_*`, `grammar`, `json_schema`) → one engine `Constraint`, compiled once before submit.
//! - `params`: sampling parameters, stop, n, logprobs, stream options → [`params::Params`].
//! - `logit_fields`: `logit_bias`, `min_tokens`, `allowed_token_ids`, `bad_words`.
//! - `known_fields`: the fields each endpoint reads or may ignore; any other is a 400.
//! - `tools`: chat `tools`, `tool_choice`, `parallel_tool_calls`; tools into the prompt,
//!   tool calls out of the text (non-streaming and as stream deltas).
//! - `tool_parse`: the tool-call formats (Hermes/Qwen, Llama 3 JSON, Mistral).
//! - `echo`: completions `echo` (the prompt's text and, with `logprobs`, its scores).
//! - `prompt`: prompt shapes (text, token ids, batches, chat messages) and tokenization,
//!   with text that cannot fit refused from its length first (`state::AppState::prompt_permit`
//!   bounds how many large bodies are parsed and prompts tokenized at once).
//! - `embeddings`: `/v1/embeddings`, one engine request per input, pooled hidden states.
//! - `responses`: `/v1/responses` (OpenAI's Responses API) run as a chat request;
//!   the `response` object and its named stream events.
//! - `anthropic`: `/v1/messages` (Anthropic's Messages API) run as a chat request;
//!   content blocks, their named stream events and Anthropic's error shape.
//! - `reasoning`: `--reasoning-parser`, `<think>…</think>` text → `reasoning_content`.
//! - `chunk_filter`: a streamed chat chunk's way out: reasoning split, then tool calls.
//! - `choices`: the engine streams of one request merged; dropping it aborts them.
//! - `choice_state`: one choice's text, logprobs, timing and finish.
//! - `openai`: response and chunk shapes, usage, logprobs formatting.
//! - `sse`: the streaming task and its framing.
//! - `metrics`: /metrics text with folio's and vLLM's names.
//! - `page`: the chat page at `/` (`assets/`, built in; public, its API calls carry the key).
//! - `render`: vLLM's renderer routes (`/v1/completions/render`, `/v1/chat/completions/
//!   render`): a prompt's token ids, which `vllm-router --policy kv_aware` scores.
//! - [`kv_events`] + `kv_wire`: the ZMQ PUB socket of `--kv-events-endpoint` and vLLM's
//!   msgpack `KVEventBatch` it sends.
//! - `ollama`: Ollama's API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`,
//!   `/api/ps`, `/api/embed`, `/api/pull`, …) over the same engine path, NDJSON out.
//! - [`ApiError`]: the one error type, rendered as OpenAI's error JSON.

mod anthropic;
mod api;
mod auth;
mod body;
mod body_deadline;
mod capacity;
mod chat_sink;
mod choice_state;
mod choices;
mod chunk_filter;
pub mod constraint;
mod cutoff;
mod drain_rate;
mod echo;
mod embeddings;
mod error;
mod fields;
mod framing;
mod generate;
pub mod grammar_compiler;
mod guard;
mod histogram;
mod json_budget;
mod known_fields;
pub mod kv_events;
mod kv_wire;
mod logit_fields;
mod lora;
mod lora_path;
pub mod metrics;
pub mod models;
mod ollama;
mod openai;
mod outbox;
mod page;
pub mod params;
mod prompt;
pub mod reasoning;
mod render;
mod responses;
mod routes;
mod running;
mod sampler_fields;
mod serve_error;
mod sink;
mod sse;
mod state;
mod strict_schema;
mod tool_harmony;
mod tool_json;
mod tool_parse;
mod tool_stream;
mod tools;
mod transport;

pub use error::ApiError;
pub use serve_error::{InvalidOption, KvEventsError, ServeError};

use axum::extract::DefaultBodyLimit;
use axum::routing::{any, get, post};
use axum::Router;
use folio_engine::EngineHandle;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;

/// Server settings that are not the engine's. The served model name is the engine's
/// (`EngineConfig::served_name`).
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Bearer token required on /v1/*, /tokenize and /detokenize (401 otherwise).
    pub api_key: Option<String>,
    /// Require the key on /metrics too (/health stays open).
    pub api_key_protects_metrics: bool,
    /// CORS origins allowed (`*` = any); empty = no CORS headers (browsers refuse).
    pub allowed_origins: Vec<String>,
    /// Host header values allowed besides `localhost` and IP literals (`*` = any). Bound
    /// to loopback the check is on; bound elsewhere, only when this lists names (see
    /// `guard`).
    pub allowed_hosts: Vec<String>,
    /// Execute POST bodies as JSON whatever their Content-Type (else 415 unless
    /// `application/json`; see `guard`).
    pub allow_any_content_type: bool,
    /// Largest accepted request body (413 above).
    pub max_body_bytes: usize,
    /// `max_tokens` when a request gives none: the rest of the context, capped at this.
    pub default_max_tokens: usize,
    /// Largest `n`.
    pub max_n: usize,
    /// Most engine requests (choices) accepted through this server and still waiting for
    /// their first token; more get 429.
    pub max_queued: usize,
    /// A generation request running longer is aborted in the engine and ends with
    /// finish reason `timeout` (what it generated so far is kept).
    pub request_timeout: Option<Duration>,
    /// An SSE comment is sent after this long without events, also while queued.
    pub keep_alive: Duration,
    /// A streaming request the engine has not admitted within this gets its response
    /// headers anyway and waits in the stream (a refusal then comes as an error event);
    /// one refused sooner gets its 429/503 status.
    pub admission_wait: Duration,
    /// After a shutdown signal, in-flight requests get this long to finish before the
    /// engine cancels them.
    pub shutdown_grace: Duration,
    /// Most open connections; more are answered 503 and closed.
    pub max_connections: usize,
    /// A request's headers must arrive within this of its first byte.
    pub header_timeout: Duration,
    /// A keep-alive connection without a request for this long is closed.
    pub idle_timeout: Duration,
    /// A request's body must arrive within this of its headers (408 and close after).
    pub body_timeout: Duration,
    /// Most bytes of a stream's output held for a client that does not read them; past
    /// it the stream is cut with finish reason `slow_reader` (see `outbox`).
    pub stream_buffer_bytes: usize,
    /// How tool calls are read from the model's text (`hermes`, `llama3_json`, `mistral`);
    /// `None`: chosen from the chat template.
    pub tool_call_parser: Option<String>,
    /// `--reasoning-parser` (`deepseek_r1`, `qwen3`): chat answers and `/v1/responses`
    /// give the model's `<think>…</think>` text as reasoning, apart from the content.
    /// `None`: off, the tags stay in the content.
    pub reasoning_parser: Option<String>,
    /// `--pooling` for /v1/embeddings; `None`: the model file's `pooling_type`, else
    /// last-token.
    pub pooling: Option<folio_engine::Pooling>,
    /// `--allow-runtime-lora` (or vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING=true`): whether
    /// `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter` may change the adapters.
    /// Off by default: loading opens a file named by the client.
    pub allow_runtime_lora: bool,
    /// `--lora-dir`: runtime loads may open only files inside this directory (after
    /// following symlinks); relative `lora_path`s are taken inside it. `None`: any path the
    /// server can read (when runtime loading is allowed at all).
    pub lora_dir: Option<std::path::PathBuf>,
    /// Grammar and schema compiles at once (0: a quarter of the cores, 1 to 4).
    pub grammar_compiles: usize,
    /// Compiles that may wait for a turn; more are refused with 503.
    pub grammar_compile_queue: usize,
    /// How long a request may wait for its compile and the compile take, together.
    pub grammar_compile_budget: Duration,
    /// Most /v1/responses answers kept for `previous_response_id` and
    /// `GET /v1/responses/{id}` (least recently used out first; 0: none kept).
    pub responses_store_max: usize,
    /// Most bytes of stored responses (their JSON, with the input items they saw).
    pub responses_store_bytes: usize,
    /// A stored response older than this is dropped.
    pub responses_store_max_age: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            api_key: None,
            api_key_protects_metrics: false,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            allow_any_content_type: false,
            max_body_bytes: 32 << 20,
            default_max_tokens: 4096,
            max_n: 8,
            max_queued: 1024,
            request_timeout: None,
            keep_alive: Duration::from_secs(10),
            admission_wait: Duration::from_millis(250),
            shutdown_grace: Duration::from_secs(10),
            max_connections: 1000,
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            stream_buffer_bytes: 256 << 10,
            tool_call_parser: None,
            reasoning_parser: None,
            pooling: None,
            allow_runtime_lora: false,
            lora_dir: None,
            grammar_compiles: 0,
            grammar_compile_queue: 8,
            grammar_compile_budget: Duration::from_secs(10),
            responses_store_max: 1024,
            responses_store_bytes: 64 << 20,
            responses_store_max_age: Duration::from_secs(24 * 3600),
        }
    }
}

impl ServerOptions {
    /// The reasoning split, if `--reasoning-parser` names one (checked by `check`).
    pub(crate) fn reasoning(&self) -> Option<reasoning::Parser> {
        self.reasoning_parser
            .as_deref()
            .and_then(reasoning::Parser::from_name)
    }

    /// Rejects settings the server cannot run with.
    pub fn check(&self) -> Result<(), InvalidOption> {
        if !self.allowed_origins.is_empty() {
            let _layer = auth::cors(&self.allowed_origins)?;
        }
        if let Some(p) = &self.tool_call_parser {
            if tool_parse::Parser::from_name(p).is_none() {
                return Err(InvalidOption(format!(
                    "--tool-call-parser: must be one of {}; got {p:?}",
                    tool_parse::NAMES
                )));
            }
        }
        if let Some(p) = &self.reasoning_parser {
            if reasoning::Parser::from_name(p).is_none() {
                return Err(InvalidOption(format!(
                    "--reasoning-parser: must be one of {}; got {p:?}",
                    reasoning::NAMES
                )));
            }
        }
        if let Some(h) = self
            .allowed_hosts
            .iter()
            .find(|h| h.trim().is_empty() || h.contains(['/', ' ', '\t', ',']))
        {
            return Err(InvalidOption(format!(
                "--allowed-hosts: each entry must be a host name (optionally with :port, or .domain for its subdomains) or *, got {h:?}"
            )));
        }
        if self.api_key.as_deref() == Some("") {
            return Err(InvalidOption("--api-key: must not be empty".into()));
        }
        if let Some(d) = &self.lora_dir {
            if !d.is_dir() {
                return Err(InvalidOption(format!(
                    "--lora-dir: must be an existing directory, got {}",
                    d.display()
                )));
            }
        }
        for (name, v) in [
            ("--max-connections", self.max_connections),
            ("--max-queued-requests", self.max_queued),
            ("--max-request-bytes", self.max_body_bytes),
            ("--stream-buffer-bytes", self.stream_buffer_bytes),
        ] {
            if v == 0 {
                return Err(InvalidOption(format!("{name}: must be at least 1, got 0")));
            }
        }
        for (name, d) in [
            ("--header-timeout-s", Some(self.header_timeout)),
            ("--keep-alive-timeout-s", Some(self.idle_timeout)),
            ("--body-timeout-s", Some(self.body_timeout)),
            ("--request-timeout-s", self.request_timeout),
        ] {
            if d == Some(Duration::ZERO) {
                return Err(InvalidOption(format!("{name}: must be positive, got 0")));
            }
        }
        Ok(())
    }
}

/// OpenAI routes folio does not serve (501 rather than 404).
const NOT_IMPLEMENTED: [&str; 11] = [
    // Only background responses can be cancelled; folio answers in the request.
    "/v1/responses/{id}/cancel",
    "/v1/audio/{*rest}",
    "/v1/images/{*rest}",
    "/v1/files",
    "/v1/files/{*rest}",
    "/v1/batches",
    "/v1/batches/{*rest}",
    "/v1/moderations",
    "/v1/fine_tuning/{*rest}",
    "/v1/assistants",
    "/v1/assistants/{*rest}",
];

/// All routes, bound to `handle`, with the Host policy of a server on loopback.
pub fn router(handle: EngineHandle, opts: ServerOptions) -> Router {
    app(state::AppState::new(
        handle,
        opts,
        std::net::Ipv4Addr::LOCALHOST.into(),
    ))
}

fn app(state: state::AppState) -> Router {
    let opts = &state.0.opts;
    let mut r = Router::new()
        .route("/v1/completions", post(routes::completions))
        .route("/v1/chat/completions", post(routes::chat))
        .route("/v1/completions/render", post(render::completions))
        .route("/v1/chat/completions/render", post(render::chat))
        .route("/v1/responses", post(responses::responses))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route(
            "/v1/responses/{id}",
            get(responses::get).delete(responses::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::input_items),
        )
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/models", get(routes::models))
        .route("/models", get(routes::models))
        .route("/models/load", post(models::http::load))
        .route("/models/unload", post(models::http::unload))
        // `{*id}`: served names are often `org/name`.
        .route("/v1/models/{*id}", get(routes::model))
        .route("/v1/load_lora_adapter", post(lora::load))
        .route("/v1/unload_lora_adapter", post(lora::unload))
        .route("/lora-adapters", get(lora::list))
        .route("/tokenize", post(routes::tokenize))
        .route("/detokenize", post(routes::detokenize))
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        .route("/", get(page::index))
        .route("/index.html", get(page::index))
        .route("/app.js", get(page::app_js))
        .merge(ollama::routes());
    for path in NOT_IMPLEMENTED {
        r = r.route(path, any(routes::not_implemented));
    }
    // NOTE: a route layer covers only the routes added above it (not the 404 fallback).
    let mut r = r
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::require_json,
        ))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(opts.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    if !opts.allowed_origins.is_empty() {
        match auth::cors(&opts.allowed_origins) {
            Ok(cors) => r = r.layer(cors),
            Err(e) => tracing::error!("{e}: CORS stays off"),
        }
    }
    // Outermost: a request under a foreign Host gets nothing else, not even a preflight.
    r.layer(axum::middleware::from_fn_with_state(
        state.clone(),
        guard::check_host,
    ))
    .with_state(state)
}

/// Binds `addr` and serves until SIGINT or SIGTERM.
pub async fn serve(
    handle: EngineHandle,
    opts: ServerOptions,
    addr: SocketAddr,
) -> Result<(), ServeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Listen {
            addr: addr.to_string(),
            source,
        })?;
    serve_listener(handle, opts, listener, shutdown_signal()).await
}

/// Serves on `listener` until `shutdown` resolves, then drains: /health answers 503 and
/// new generation requests 503 while in-flight requests get `opts.shutdown_grace` to
/// finish; the engine cancels the rest; then the listener closes, connections close once
/// their responses are done, and the engine shuts down.
pub async fn serve_listener(
    handle: EngineHandle,
    opts: ServerOptions,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    opts.check()?;
    let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    let info = handle.info.clone();
    let name = info.model_name.clone();
    let cap = capacity::Capacity::of(&info);
    println!(
        "folio: serving {name} at http://{addr}/v1 ({}; KV {} blocks x {} tokens, {}; numerics {})",
        cap.describe(),
        info.num_blocks,
        info.block_size,
        info.kv_format,
        info.numerics
    );
    if cap.pool_bound() {
        tracing::warn!(
            context = cap.context,
            kv_capacity_tokens = cap.kv_tokens,
            "the KV pool is smaller than the context: max_model_len is {} (raise --kv-cache-bytes for the whole context)",
            cap.max_model_len()
        );
    }
    tracing::info!(%addr, model = %name, kv_capacity_tokens = info.kv_capacity_tokens, auth = opts.api_key.is_some(), "listening");
    let state = state::AppState::new(handle, opts, addr.ip());
    run(state, listener, shutdown).await
}

/// Serves the models of `models` (loaded on demand, see [`models::Registry`]) on
/// `listener` until `shutdown` resolves, then drains as [`serve_listener`] does.
pub async fn serve_models(
    models: std::sync::Arc<models::Registry>,
    opts: ServerOptions,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    opts.check()?;
    let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    let names: Vec<String> = models.list().into_iter().map(|e| e.name).collect();
    println!(
        "folio: serving {} models at http://{addr}/v1, loaded on first use: {}",
        names.len(),
        names.join(", ")
    );
    tracing::info!(%addr, models = names.len(), auth = opts.api_key.is_some(), "listening");
    // Idle models whose keep-alive ran out are unloaded by this task (it ends with the
    // registry).
    let weak = std::sync::Arc::downgrade(&models);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            match weak.upgrade() {
                Some(r) => r.reap(),
                None => break,
            }
        }
    });
    let state = state::AppState::with_models(models, opts, addr.ip());
    run(state, listener, shutdown).await
}

/// The accept loop until `shutdown`, then the drain and the engines' shutdown.
async fn run(
    state: state::AppState,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    let opts = &state.0.opts;
    let grace = opts.shutdown_grace;
    let lim = transport::TransportLimits {
        max_connections: opts.max_connections,
        header_timeout: opts.header_timeout,
        idle_timeout: opts.idle_timeout,
        body_timeout: opts.body_timeout,
        max_body_bytes: opts.max_body_bytes,
    };
    if !state.0.hosts.enabled() {
        tracing::info!(%addr, "Host header check off (--allowed-hosts '*', or not bound to loopback and no names listed)");
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(transport::accept_loop(
        listener,
        app(state.clone()),
        lim,
        stop_rx,
    ));

    shutdown.await;
    state
        .0
        .draining
        .store(true, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(
        grace_s = grace.as_secs_f64(),
        in_flight = state.active(),
        "shutting down: /health answers 503; finishing in-flight requests"
    );
    let finished = async {
        while state.active() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(grace, finished).await.is_err() {
        tracing::info!("grace period over: cancelling remaining requests");
        state.0.models.shutdown();
    }
    let _ = stop_tx.send(true);
    server.await?;
    state.0.models.shutdown();
    tracing::info!("server stopped");
    Ok(())
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
