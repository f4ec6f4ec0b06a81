//! `folio ps`: the models a running `folio serve` holds in memory (loaded, or being
//! loaded), from its `GET /v1/models`.

use super::remote::{self, Server};
use super::ServerArgs;
use anyhow::{bail, Context, Result};
use serde_json::Value;

pub fn run(args: &ServerArgs) -> Result<()> {
    let server = Server::new(args);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    let Some(cards) = rt.block_on(server.models())? else {
        bail!(
            "no folio server answers at {}; start one with `folio serve`, or pass the --host and --port it listens on",
            server.url()
        );
    };
    print!("{}", render(&cards));
    Ok(())
}

/// NAME, STATUS and CONTEXT (`max_model_len`) of every model card loaded or loading.
pub fn render(cards: &[Value]) -> String {
    let rows: Vec<Vec<String>> = cards
        .iter()
        .filter_map(|c| {
            let status = remote::status(c).filter(|s| *s != "unloaded")?;
            Some(vec![
                c["id"].as_str().unwrap_or("").to_string(),
                status.to_string(),
                c["max_model_len"]
                    .as_u64()
                    .map_or_else(|| "-".to_string(), |n| n.to_string()),
            ])
        })
        .collect();
    folio_fetch::table::render(&["NAME", "STATUS", "CONTEXT"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_served_models_in_memory_are_listed() {
        let cards = [
            json!({"id": "a", "max_model_len": 8192, "parent": null, "status": {"value": "loaded"}}),
            json!({"id": "b", "max_model_len": 2048, "parent": null, "status": {"value": "unloaded"}}),
            json!({"id": "gemma", "parent": null, "status": {"value": "loading"}}),
            json!({"id": "adapter", "max_model_len": 8192, "parent": "a"}),
            json!({"id": "single", "max_model_len": 4096, "parent": null}),
        ];
        assert_eq!(
            render(&cards),
            "NAME    STATUS   CONTEXT\n\
             a       loaded   8192\n\
             gemma   loading  -\n\
             single  loaded   4096\n"
        );
        assert_eq!(render(&[]), "NAME  STATUS  CONTEXT\n");
    }
}
