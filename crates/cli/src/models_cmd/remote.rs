//! A running `folio serve` as `ps` and `run` talk to it: its model cards, and a streamed
//! chat answer.

use super::answer::{Opts, Outcome};
use super::interrupt::Answering;
use super::ServerArgs;
use anyhow::{bail, Context, Result};
use folio_bench::client::{self, BaseUrl, SseParser};
use folio_tokenizer::ChatMessage;
use serde_json::{json, Value};
use std::io::Write;
use std::time::Duration;

/// How long a connection attempt may take before "no server answers".
const CONNECT: Duration = Duration::from_secs(2);
/// How long the server may send nothing while answering (it sends keep-alive comments
/// while a request is queued).
const IDLE: Duration = Duration::from_secs(300);

pub struct Server {
    base: BaseUrl,
    /// `Bearer KEY`, when a key is given.
    auth: Option<String>,
}

impl Server {
    pub fn new(args: &ServerArgs) -> Server {
        let key = args.api_key.clone().or_else(|| {
            std::env::var("FOLIO_API_KEY")
                .ok()
                .filter(|k| !k.is_empty())
        });
        Server {
            base: BaseUrl {
                host: args.host.clone(),
                port: args.port,
                prefix: String::new(),
            },
            auth: key.map(|k| format!("Bearer {k}")),
        }
    }

    /// `http://HOST:PORT`, for messages.
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.base.host, self.base.port)
    }

    async fn send(&self, method: &str, path: &str, body: &[u8]) -> Result<client::Response> {
        let headers: Vec<(&str, &str)> = self
            .auth
            .as_deref()
            .map(|a| ("Authorization", a))
            .into_iter()
            .collect();
        let r = client::send_with(&self.base, method, path, &headers, body, IDLE).await?;
        if r.head.status == 401 {
            bail!(
                "the server at {} wants an API key: pass --api-key or set FOLIO_API_KEY",
                self.url()
            );
        }
        Ok(r)
    }

    /// The cards of `GET /v1/models`; `None` when nothing accepts a connection there.
    pub async fn models(&self) -> Result<Option<Vec<Value>>> {
        let addr = (self.base.host.as_str(), self.base.port);
        match tokio::time::timeout(CONNECT, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(_)) => {}
            _ => return Ok(None),
        }
        let r = self.send("GET", "/v1/models", b"").await?;
        let status = r.head.status;
        let body = r.text(IDLE).await?;
        if status != 200 {
            bail!("GET {}/v1/models answered {status}: {body}", self.url());
        }
        let v: Value = serde_json::from_str(&body)
            .with_context(|| format!("GET {}/v1/models: not JSON: {body}", self.url()))?;
        match v["data"].as_array() {
            Some(cards) => Ok(Some(cards.clone())),
            None => bail!("GET {}/v1/models: no `data` list in {body}", self.url()),
        }
    }

    /// Streams the answer to `messages` from model `model` into `out` (text, then a line
    /// end), until it ends or `stop` fires (the connection is closed: the server cancels).
    pub async fn answer(
        &self,
        model: &str,
        messages: &[ChatMessage],
        opts: &Opts,
        out: &mut impl Write,
        mut stop: Option<&mut Answering<'_>>,
    ) -> Result<Outcome> {
        let msgs: Vec<Value> = messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        let s = &opts.sampling;
        let mut body = json!({
            "model": model,
            "messages": msgs,
            "stream": true,
            "temperature": s.temperature,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "min_p": s.min_p,
        });
        if let Some(seed) = s.seed {
            body["seed"] = json!(seed);
        }
        if let Some(n) = opts.max_tokens {
            body["max_tokens"] = json!(n);
        }
        let mut r = self
            .send("POST", "/v1/chat/completions", body.to_string().as_bytes())
            .await?;
        if r.head.status != 200 {
            let status = r.head.status;
            let text = r.text(IDLE).await?;
            let msg = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(String::from))
                .unwrap_or(text);
            bail!("the server at {} answered {status}: {msg}", self.url());
        }
        let mut sse = SseParser::default();
        let mut text = String::new();
        loop {
            let bytes = tokio::select! {
                b = r.next_bytes(IDLE) => b?,
                _ = super::answer::pressed(&mut stop) => {
                    writeln!(out)?;
                    out.flush()?;
                    return Ok(Outcome::Stopped);
                }
            };
            let Some((bytes, _)) = bytes else {
                bail!(
                    "the server at {} closed the stream before [DONE]",
                    self.url()
                );
            };
            for data in sse.push(&bytes) {
                if data == "[DONE]" {
                    writeln!(out)?;
                    out.flush()?;
                    return Ok(Outcome::Done(text));
                }
                let v: Value = serde_json::from_str(&data)
                    .with_context(|| format!("a stream chunk that is not JSON: {data}"))?;
                if let Some(e) = v.get("error") {
                    bail!(
                        "the server at {} failed the answer: {}",
                        self.url(),
                        e["message"]
                    );
                }
                if let Some(piece) = v["choices"][0]["delta"]["content"].as_str() {
                    out.write_all(piece.as_bytes())?;
                    out.flush()?;
                    text.push_str(piece);
                }
            }
        }
    }
}

/// Whether a card is a model being served (not a LoRA adapter) and its status:
/// `loaded`, `loading` or `unloaded`; a card without one (a single-model server) is loaded.
pub fn status(card: &Value) -> Option<&str> {
    if !card["parent"].is_null() {
        return None;
    }
    Some(card["status"]["value"].as_str().unwrap_or("loaded"))
}

/// The id of the card `name` means: the card called `name`, or, for a catalogue name, the
/// card named as a server names its file (the file name without `.gguf`).
pub fn find(cards: &[Value], name: &str) -> Option<String> {
    let stem = folio_fetch::catalog::find_loose(name)
        .map(|e| e.file_name.strip_suffix(".gguf").unwrap_or(e.file_name));
    cards
        .iter()
        .filter(|c| status(c).is_some())
        .filter_map(|c| c["id"].as_str())
        .find(|id| *id == name || Some(*id) == stem)
        .map(String::from)
}
