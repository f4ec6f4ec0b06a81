//! The commands of a local model runner, named as Ollama's: `pull`, `list` and `rm` work on
//! the model cache (`$FOLIO_HOME/models`, through folio-fetch), `ps` asks a running
//! `folio serve`, and `run` chats with a model through a running server or in-process.

pub mod list;
pub mod ps;
pub mod pull;
pub mod rm;
pub mod run;

mod answer;
mod chat;
mod interrupt;
mod remote;

/// Where a running `folio serve` listens (`ps`, `run`): serve's defaults.
#[derive(clap::Args, Clone, Debug)]
pub struct ServerArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The server's API key, sent as `Authorization: Bearer KEY` (default: the
    /// FOLIO_API_KEY environment variable).
    #[arg(long)]
    pub api_key: Option<String>,
}
