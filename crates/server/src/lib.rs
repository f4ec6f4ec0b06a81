//! folio-server: the OpenAI-compatible HTTP front door of a folio engine.
//!
//! # Layout
//!
//! - [`router`] / [`serve`]: the axum routes, graceful shutdown on SIGINT/SIGTERM.
//! - `routes`: handlers; `generate`: validate → tokenize → submit n → stream or collect.
//! - `body` + `fields`: JSON bodies read field by field; errors name field, limit and value.
//! - `params`: sampling parameters, stop, n, logprobs, stream options → [`params::Params`].
//! - `prompt`: prompt shapes (text, token ids, batches, chat messages) and tokenization.
//! - `choices`: the engine streams of one request merged; dropping it aborts them.
//! - `choice_state`: one choice's text, logprobs, timing and finish.
//! - `openai`: response and chunk shapes, usage, logprobs formatting.
//! - `sse`: the streaming task and its framing.
//! - `metrics`: /metrics text with folio's and vLLM's names.
//! - [`ApiError`]: the one error type, rendered as OpenAI's error JSON.

mod body;
mod choice_state;
mod choices;
mod error;
mod fields;
mod generate;
pub mod metrics;
mod openai;
pub mod params;
mod prompt;
mod routes;
mod sse;
mod state;

pub use error::ApiError;

use anyhow::Context;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use folio_engine::EngineHandle;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;

/// Server settings that are not the engine's.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Name in `model` fields and /v1/models; defaults to the engine's model name.
    pub served_model_name: Option<String>,
    /// Largest accepted request body (413 above).
    pub max_body_bytes: usize,
    /// `max_tokens` when a request gives none: the rest of the context, capped at this.
    pub default_max_tokens: usize,
    /// Largest `n`.
    pub max_n: usize,
    /// Most engine requests (choices) in flight through this server; more get 429.
    pub max_in_flight: usize,
    /// An SSE comment is sent after this long without events.
    pub keep_alive: Duration,
    /// After a shutdown signal, in-flight requests get this long to finish before the
    /// engine cancels them.
    pub shutdown_grace: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            served_model_name: None,
            max_body_bytes: 4 << 20,
            default_max_tokens: 4096,
            max_n: 8,
            max_in_flight: 1024,
            keep_alive: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// All routes, bound to `handle`.
pub fn router(handle: EngineHandle, opts: ServerOptions) -> Router {
    let limit = opts.max_body_bytes;
    let state = state::AppState::new(handle, opts);
    Router::new()
        .route("/v1/completions", post(routes::completions))
        .route("/v1/chat/completions", post(routes::chat))
        .route("/v1/models", get(routes::models))
        .route("/tokenize", post(routes::tokenize))
        .route("/detokenize", post(routes::detokenize))
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Binds `addr` and serves until SIGINT or SIGTERM.
pub async fn serve(
    handle: EngineHandle,
    opts: ServerOptions,
    addr: SocketAddr,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    serve_listener(handle, opts, listener, shutdown_signal()).await
}

/// Serves on `listener` until `shutdown` resolves, then: stops accepting, gives in-flight
/// requests `opts.shutdown_grace` to finish, cancels the rest through the engine, waits for
/// the connections to close and shuts the engine down.
pub async fn serve_listener(
    handle: EngineHandle,
    opts: ServerOptions,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr = listener
        .local_addr()
        .context("listener has no local address")?;
    let info = handle.info.clone();
    let name = opts
        .served_model_name
        .clone()
        .unwrap_or_else(|| info.model_name.clone());
    println!(
        "folio: serving {name} at http://{addr}/v1 (context {} tokens; KV capacity {} tokens = {} blocks x {} tokens, {}; numerics {})",
        info.context_length, info.kv_capacity_tokens, info.num_blocks, info.block_size, info.kv_format, info.numerics
    );
    tracing::info!(%addr, model = %name, kv_capacity_tokens = info.kv_capacity_tokens, "listening");
    let grace = opts.shutdown_grace;
    let engine = handle.clone();
    let app = router(handle.clone(), opts);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            tracing::info!(
                grace_s = grace.as_secs_f64(),
                "shutting down: not accepting; finishing in-flight requests"
            );
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                tracing::info!("grace period over: cancelling remaining requests");
                engine.shutdown();
            });
        })
        .await
        .context("server failed")?;
    handle.shutdown();
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
