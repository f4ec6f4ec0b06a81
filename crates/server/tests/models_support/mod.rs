//! Shared by the `models_*` tests: three models (SmolLM2 and Gemma 3 270M from the model
//! cache, a tiny random llama written to a temp file), a loader like `folio serve`'s, and a
//! server of several models on an ephemeral port.

#![allow(dead_code)]

use folio_gguf::GgmlType;
use folio_server::models::{Loader, ModelSource, Policy, Registry};
use folio_testkit::temp::TempDir;
use folio_testkit::tiny::{build, Shape};
use folio_tokenizer::{token_type, Tokenizer, TokenizerSpec};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const KV_BYTES: usize = 32 << 20;
const TINY_VOCAB: usize = 300;

/// The cached models, or `None` (the reason printed) when one is missing.
pub fn cached() -> Option<(PathBuf, PathBuf)> {
    let dir = folio_fetch::models_dir();
    let smol = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let gemma = dir.join("gemma-3-270m-q4_k_m.gguf");
    for p in [&smol, &gemma] {
        if !p.is_file() {
            eprintln!("SKIPPED: {} is not in the model cache", p.display());
            return None;
        }
    }
    Some((smol, gemma))
}

/// A tiny random llama GGUF in a temp file (its tokenizer is [`tiny_tokenizer`]), removed
/// with the returned guard.
pub fn tiny_file(tag: &str) -> (TempDir, PathBuf) {
    let sh = Shape {
        d: 128,
        heads: 4,
        kv_heads: 2,
        hd: 32,
        ffn: 256,
        vocab: TINY_VOCAB,
        layers: 2,
        ctx: 512,
    };
    let dir = TempDir::new("folio-models", tag).unwrap();
    let p = dir.path().join("tiny.gguf");
    std::fs::write(&p, build(&sh, "llama", GgmlType::Q8_0, 11)).unwrap();
    (dir, p)
}

fn byte_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).expect("char")
}

/// The tiny model's tokenizer: 3 control tokens, the 256 byte tokens, fillers.
pub fn tiny_tokenizer() -> Tokenizer {
    let mut tokens: Vec<String> = vec!["<|end|>".into(), "<s>".into(), "<pad>".into()];
    let mut token_types = vec![token_type::CONTROL; 3];
    for i in 0..TINY_VOCAB - 3 {
        tokens.push(match i {
            0..256 => byte_char(i as u8).to_string(),
            _ => format!("w{i}"),
        });
        token_types.push(token_type::NORMAL);
    }
    Tokenizer::from_spec(TokenizerSpec {
        model: "gpt2".into(),
        pre: Some("gpt2".into()),
        tokens,
        token_types,
        merges: Vec::new(),
        bos_id: Some(1),
        eos_id: Some(0),
        add_bos: false,
        add_eos: false,
        ..TokenizerSpec::default()
    })
    .expect("tiny tokenizer")
}

/// Starts an engine on `path` served as `name` (what `folio serve`'s loader does).
pub fn engine(path: &std::path::Path, name: &str) -> folio_engine::EngineHandle {
    let f = folio_gguf::GgufFile::open(path).expect("model file opens");
    let model = folio_model::Model::from_gguf(&f).expect("model loads");
    let tok = if path.file_name().is_some_and(|n| n == "tiny.gguf") {
        tiny_tokenizer()
    } else {
        Tokenizer::from_gguf(&f).expect("tokenizer")
    };
    drop(f);
    let cfg = folio_engine::EngineConfig {
        kv_cache_bytes: KV_BYTES,
        served_name: Some(name.to_string()),
        ..folio_engine::EngineConfig::default()
    };
    folio_engine::spawn_engine(model, Arc::new(tok), path, cfg).expect("engine starts")
}

/// A loader that counts its loads and waits `delay` before each.
pub fn loader(loads: Arc<AtomicUsize>, delay: Duration) -> Loader {
    Arc::new(move |src: &ModelSource| {
        loads.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(delay);
        Ok(engine(src.path.as_ref().unwrap(), &src.name))
    })
}

pub fn sources(models: &[(&str, &PathBuf)]) -> Vec<ModelSource> {
    models
        .iter()
        .map(|(n, p)| ModelSource::file(*n, (*p).clone(), KV_BYTES as u64))
        .collect()
}

/// A server of the models of `reg` on 127.0.0.1:0; dropping the sender stops it.
pub fn serve(reg: Arc<Registry>) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            let opts = folio_server::ServerOptions {
                shutdown_grace: Duration::from_millis(100),
                ..Default::default()
            };
            let _ = folio_server::serve_models(reg, opts, listener, async move {
                let _ = stop_rx.await;
            })
            .await;
        });
    });
    (addr_rx.recv().unwrap(), stop_tx)
}

pub fn policy(max: usize, keep_alive: Option<Duration>) -> Policy {
    Policy {
        max_loaded: max,
        memory_bytes: None,
        keep_alive,
        load_timeout: Duration::from_secs(120),
    }
}

/// `model`'s `status.value` in `/v1/models`.
pub fn status(addr: SocketAddr, model: &str) -> String {
    let list = folio_testkit::http::get(addr, "/v1/models").json();
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == model)
        .map(|c| c["status"]["value"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("{model} not listed: {list}"))
}

/// Waits (up to 10 s) until `model`'s status is `want`.
pub fn wait_status(addr: SocketAddr, model: &str, want: &str) {
    let start = std::time::Instant::now();
    while status(addr, model) != want {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{model} never became {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Greedy completion text of `model`.
pub fn greedy(addr: SocketAddr, model: Option<&str>, prompt: &str) -> String {
    let mut body = serde_json::json!({"prompt": prompt, "max_tokens": 12, "temperature": 0});
    if let Some(m) = model {
        body["model"] = m.into();
    }
    let r = folio_testkit::http::post_ok(addr, "/v1/completions", &body);
    r["choices"][0]["text"].as_str().unwrap().to_string()
}

/// This process's resident set (VmRSS), bytes.
pub fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}
