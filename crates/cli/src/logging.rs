//! Log output: human text (coloured only when stderr is a terminal, so `folio serve 2> log`
//! holds no escape sequences) or one JSON object a line for log collectors
//! (`--log-format json`). The level filter comes from `FOLIO_LOG` (default `info`).

use clap::ValueEnum;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; ANSI colour only on a terminal.
    #[default]
    Text,
    /// One JSON object a line (timestamp, level, target, fields).
    Json,
}

/// Installs the global subscriber. Called once, before any subcommand runs.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_env("FOLIO_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}
