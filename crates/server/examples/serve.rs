//! Runs folio's server on the test model (`cargo run --release -p folio-server --example
//! serve -- [PORT]`), through the same `serve::run` the CLI uses; for trying clients such
//! as scripts/openai_client_check.py before `folio serve` is wired.

#[path = "../../cli/src/serve.rs"]
mod serve;

use std::sync::Arc;

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let port = std::env::args()
        .nth(1)
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(8000);
    let path = folio_fetch::test_model()?;
    let f = folio_gguf::GgufFile::open(&path)?;
    let model = folio_model::Model::from_gguf(&f)?;
    let tok = Arc::new(folio_tokenizer::Tokenizer::from_gguf(&f)?);
    let handle =
        folio_engine::spawn_engine(model, tok, &path, folio_engine::EngineConfig::default())?;
    serve::run(handle, "127.0.0.1", port, Default::default(), None)
}
