//! LoRA adapters over HTTP on the default model: load, select by `model` or `lora`, list,
//! unload and re-load at runtime; unknown adapters are 404s naming them; 50 mixed-adapter
//! streams at once finish cleanly and leave the KV and adapter slots idle.

use folio_testkit::http as common;
use folio_testkit::temp::TempDir;

use common::{get, metric, post, request_with, wait_idle, Server};
use serde_json::{json, Value};
use std::path::PathBuf;

/// `tag` keeps each test's files apart: tests run in parallel threads of one process, and
/// rewriting a file another test has mapped would fault it. The files go with the guard.
fn adapters(n: usize, tag: &str) -> (TempDir, Vec<PathBuf>) {
    let f = folio_gguf::GgufFile::open(&folio_fetch::test_model().unwrap()).unwrap();
    let cfg = folio_model::ModelConfig::from_gguf(&f).unwrap();
    let dir = TempDir::new("folio-lora-http", tag).unwrap();
    let files = folio_model::lora::write_random_adapters(&cfg, dir.path(), n, 0.3, 2000).unwrap();
    (dir, files)
}

fn serve() -> Option<Server> {
    let e = common::engine_with(
        folio_engine::EngineConfig {
            max_loras: 4,
            ..Default::default()
        },
        None,
    )?;
    let opts = folio_server::ServerOptions {
        allow_runtime_lora: true,
        ..Default::default()
    };
    Some(common::start(e, opts))
}

fn load(s: &Server, name: &str, path: &std::path::Path) -> common::Resp {
    post(
        s.addr,
        "/v1/load_lora_adapter",
        &json!({"lora_name": name, "lora_path": path}),
    )
}

fn chat(s: &Server, model: &str, extra: Value) -> common::Resp {
    let mut body = json!({
        "model": model,
        "messages": [{"role": "user", "content": "Write a haiku about the sea."}],
        "max_tokens": 16,
        "temperature": 0,
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    post(s.addr, "/v1/chat/completions", &body)
}

fn content(r: &common::Resp) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn load_use_unload_reload_over_http() {
    let Some(s) = serve() else { return };
    let (_dir, files) = adapters(2, "reload");
    let base_name = s.engine.info.model_name.clone();
    let base = content(&chat(&s, &base_name, json!({})));

    // Unknown adapter: 404 naming it.
    let r = chat(&s, "sea-poet", json!({}));
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("`sea-poet`"));

    let r = load(&s, "sea-poet", &files[0]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.text(),
        "Success: LoRA adapter 'sea-poet' added successfully."
    );
    // Loading the same name twice is a 400 saying why; a file that is not an adapter gets
    // the one generic answer (it says nothing of what the file is).
    let r = load(&s, "sea-poet", &files[1]);
    assert_eq!(r.status, 400);
    assert!(r.text().contains("already loaded"), "{}", r.text());
    let r = load(&s, "bad", &folio_fetch::test_model().unwrap());
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("not a loadable LoRA adapter"),
        "{}",
        r.text()
    );

    // /v1/models lists it with its parent.
    let models = get(s.addr, "/v1/models").json();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![base_name.as_str(), "sea-poet"]);
    assert_eq!(models["data"][1]["parent"], base_name.as_str());
    assert_eq!(get(s.addr, "/v1/models/sea-poet").status, 200);

    // Selected by model name (vLLM) and by the lora list (llama-server): the same tokens,
    // other than the base model's; the response names the adapter.
    let r = chat(&s, "sea-poet", json!({}));
    assert_eq!(r.json()["model"], "sea-poet");
    let by_name = content(&r);
    let by_list = content(&chat(
        &s,
        &base_name,
        json!({"lora": [{"id": 0, "scale": 1.0}]}),
    ));
    assert_eq!(by_name, by_list);
    assert_ne!(by_name, base, "the adapter did not change the output");
    // Scale 0 is the base model.
    assert_eq!(
        content(&chat(
            &s,
            &base_name,
            json!({"lora": [{"name": "sea-poet", "scale": 0}]})
        )),
        base
    );
    let r = chat(&s, &base_name, json!({"lora": [{"id": 7}]}));
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "lora[0].id");

    // Unload: gone (404), then re-load under the same name: the same output again.
    let r = post(
        s.addr,
        "/v1/unload_lora_adapter",
        &json!({"lora_name": "sea-poet"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(chat(&s, "sea-poet", json!({})).status, 404);
    let r = post(
        s.addr,
        "/v1/unload_lora_adapter",
        &json!({"lora_name": "sea-poet"}),
    );
    assert_eq!(r.status, 404);
    assert!(r.text().contains("'sea-poet'"), "{}", r.text());
    assert_eq!(load(&s, "sea-poet", &files[0]).status, 200);
    assert_eq!(content(&chat(&s, "sea-poet", json!({}))), by_name);
}

#[test]
fn fifty_mixed_adapter_streams_finish_and_leave_slots_idle() {
    let Some(s) = serve() else { return };
    let (_dir, files) = adapters(3, "fifty");
    for (i, f) in files.iter().enumerate() {
        assert_eq!(load(&s, &format!("a{i}"), f).status, 200);
    }
    let base_name = s.engine.info.model_name.clone();
    let addr = s.addr;
    let threads: Vec<_> = (0..50)
        .map(|i| {
            let model = match i % 4 {
                3 => base_name.clone(),
                k => format!("a{k}"),
            };
            std::thread::spawn(move || {
                let body = json!({
                    "model": model,
                    "messages": [{"role": "user", "content": format!("Count to {}.", i % 7 + 2)}],
                    "max_tokens": 12,
                    "stream": true,
                    "temperature": 0.7,
                    "seed": i,
                });
                let r = post(addr, "/v1/chat/completions", &body);
                assert_eq!(r.status, 200, "{}", r.text());
                let (chunks, done) = r.sse();
                assert!(done, "stream {i} did not end with [DONE]");
                assert!(
                    chunks.iter().all(|c| c.get("error").is_none()),
                    "stream {i}: {chunks:?}"
                );
                assert!(chunks.iter().all(|c| c["model"] == model.as_str()));
                let finish = chunks
                    .iter()
                    .rev()
                    .find_map(|c| c["choices"][0]["finish_reason"].as_str());
                assert!(
                    matches!(finish, Some("stop" | "length")),
                    "stream {i}: {finish:?}"
                );
            })
        })
        .collect();
    for t in threads {
        t.join().expect("stream thread");
    }
    // The engine publishes its gauges at the end of the step that sent the last tokens,
    // which may come just after a client read [DONE].
    let m = wait_idle(addr, std::time::Duration::from_secs(10));
    let mn = format!("{{model_name=\"{base_name}\"}}");
    assert_eq!(
        metric(&m, &format!("vllm:num_requests_running{mn}")),
        Some(0.0)
    );
    assert_eq!(
        metric(&m, &format!("vllm:num_requests_waiting{mn}")),
        Some(0.0)
    );
    assert_eq!(metric(&m, "folio_kv_blocks_used"), Some(0.0));
    assert_eq!(metric(&m, "folio_lora_slots_used"), Some(3.0));
    assert!(
        m.contains("vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"}"),
        "{m}"
    );
    for (i, n) in [(0, 13.0), (1, 13.0), (2, 12.0)] {
        assert_eq!(
            metric(
                &m,
                &format!("folio_lora_requests_total{{adapter=\"a{i}\"}}")
            ),
            Some(n)
        );
    }
    let list = get(addr, "/lora-adapters").json();
    assert!(
        list.as_array().unwrap().iter().all(|a| a["in_use"] == 0),
        "{list}"
    );
}

/// With the default options runtime loading is refused, naming the flag that allows it.
#[test]
fn runtime_loading_is_off_by_default_naming_the_flag() {
    let Some(e) = common::engine_with(Default::default(), None) else {
        return;
    };
    let s = common::start(e, folio_server::ServerOptions::default());
    let (_dir, files) = adapters(1, "off");
    for r in [
        load(&s, "a", &files[0]),
        post(
            s.addr,
            "/v1/unload_lora_adapter",
            &json!({"lora_name": "a"}),
        ),
    ] {
        assert_eq!(r.status, 403, "{}", r.text());
        let m = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            m.contains("--allow-runtime-lora") && m.contains("VLLM_ALLOW_RUNTIME_LORA_UPDATING"),
            "{m}"
        );
    }
    assert_eq!(
        get(s.addr, "/v1/models").json()["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// Allowed and confined to `--lora-dir`, behind an API key: paths outside the directory
/// are refused before they are looked at; a non-adapter, a missing file and a FIFO inside
/// it get one generic answer with none of their bytes (a FIFO without blocking); the
/// adapter list needs the key and shows file names only.
#[test]
fn runtime_loading_is_confined_to_the_lora_dir_and_reveals_nothing() {
    let Some(e) = common::engine_with(Default::default(), None) else {
        return;
    };
    let (_dir, files) = adapters(1, "confined");
    let dir = files[0].parent().unwrap().to_path_buf();
    let opts = folio_server::ServerOptions {
        allow_runtime_lora: true,
        lora_dir: Some(dir.clone()),
        api_key: Some("sekret".into()),
        ..Default::default()
    };
    let s = common::start(e, opts);
    let auth = [("Authorization", "Bearer sekret")];
    let load_as = |name: &str, path: &str| {
        let body = json!({"lora_name": name, "lora_path": path}).to_string();
        request_with(
            s.addr,
            "POST",
            "/v1/load_lora_adapter",
            &auth,
            body.as_bytes(),
        )
    };
    let message = |r: &common::Resp| -> String {
        assert_eq!(r.status, 400, "{}", r.text());
        r.json()["error"]["message"].as_str().unwrap().to_string()
    };

    // Outside the directory: refused whether the file exists or not, the same way.
    let outside_existing = folio_fetch::test_model().unwrap();
    for p in [
        outside_existing.to_str().unwrap(),
        "/nonexistent/adapter.gguf",
        "../../etc/passwd",
    ] {
        let m = message(&load_as("x", p));
        assert!(m.contains("--lora-dir"), "{p}: {m}");
    }

    // Inside: a text file that looks like /etc/shadow, a missing file and a FIFO get the
    // generic answer, no magic bytes, no reason.
    std::fs::write(
        dir.join("shadow"),
        b"root:$6$salt$hash:19000:0:99999:7:::\n",
    )
    .unwrap();
    let generic = "lora_path: not a loadable LoRA adapter";
    let shadow = message(&load_as("x", "shadow"));
    assert!(shadow.starts_with(generic), "{shadow}");
    assert!(
        !shadow.contains("magic") && !shadow.contains("72, 6f"),
        "{shadow}"
    );
    assert_eq!(message(&load_as("x", "missing.gguf")), shadow);
    let fifo = dir.join("fifo.gguf");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.map(|st| st.success()).unwrap_or(false) {
        let t0 = std::time::Instant::now();
        assert_eq!(message(&load_as("x", "fifo.gguf")), shadow);
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    }

    // A real adapter inside, by a relative path: loaded.
    let name = files[0].file_name().unwrap().to_str().unwrap();
    let r = load_as("inside", name);
    assert_eq!(r.status, 200, "{}", r.text());

    // The list needs the key and gives file names, not server paths.
    assert_eq!(get(s.addr, "/lora-adapters").status, 401);
    let r = request_with(s.addr, "GET", "/lora-adapters", &auth, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let list = r.json();
    assert_eq!(list[0]["name"], "inside");
    assert_eq!(list[0]["path"], name, "{list}");
    let _ = std::fs::remove_file(&fifo);
}
