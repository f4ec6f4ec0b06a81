//! Ollama's model endpoints over real HTTP on the real model: `/api/version`, `/api/tags`,
//! `/api/show` (details and metadata from the GGUF header), `/api/ps`, `/api/embed` and
//! `/api/embeddings` (the `/v1/embeddings` vectors), `/api/pull` of the cached catalogue
//! default with Ollama's progress lines, of an `hf:` name from the Hugging Face cache
//! (offline), and the 400/404s of pull and delete.

use folio_testkit::http as common;

use common::{get, post, post_ok, request, Server};
use serde_json::{json, Value};

fn server() -> Option<&'static Server> {
    common::shared()
}

fn name(s: &Server) -> String {
    s.engine.info.model_name.clone()
}

fn ok(r: common::Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// SmolLM2-135M-Instruct Q4_1's details as Ollama writes them.
fn smollm2_details() -> Value {
    json!({"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
           "parameter_size": "134.52M", "quantization_level": "Q4_1"})
}

fn is_smollm2(s: &Server) -> bool {
    s.engine
        .info
        .model_path
        .ends_with("SmolLM2-135M-Instruct.Q4_1.gguf")
}

#[test]
fn version_tags_show_and_ps() {
    let Some(s) = server() else { return };
    assert_eq!(ok(get(s.addr, "/api/version")), json!({"version": "0.9.0"}));
    let size = std::fs::metadata(&s.engine.info.model_path).unwrap().len();
    let tags = ok(get(s.addr, "/api/tags"));
    let models = tags["models"].as_array().unwrap();
    assert_eq!(models.len(), 1, "{tags}");
    let m = &models[0];
    assert_eq!(
        (m["name"].as_str(), m["model"].as_str()),
        (Some(name(s).as_str()), Some(name(s).as_str()))
    );
    assert_eq!(m["size"], size);
    if is_smollm2(s) {
        assert_eq!(m["details"], smollm2_details());
        assert_eq!(m["digest"].as_str().unwrap().len(), "sha256:".len() + 64);
    }
    let modified = m["modified_at"].as_str().unwrap();
    assert!(
        modified.ends_with('Z') && modified.len() == 30,
        "{modified}"
    );

    let show = post_ok(s.addr, "/api/show", &json!({"model": name(s)}));
    assert_eq!(show["details"], m["details"]);
    assert_eq!(
        show["model_info"]["general.architecture"],
        m["details"]["family"]
    );
    let f = folio_gguf::GgufFile::open(std::path::Path::new(&s.engine.info.model_path)).unwrap();
    let params: u64 = f.tensors().iter().map(|t| t.n_elements()).sum();
    assert_eq!(show["model_info"]["general.parameter_count"], params);
    // The vocabulary is left out unless verbose.
    assert_eq!(show["model_info"]["tokenizer.ggml.tokens"], Value::Null);
    let verbose = post_ok(
        s.addr,
        "/api/show",
        &json!({"model": name(s), "verbose": true}),
    );
    assert_eq!(
        verbose["model_info"]["tokenizer.ggml.tokens"]
            .as_array()
            .unwrap()
            .len(),
        s.engine.info.vocab_size
    );
    assert_eq!(
        show["template"],
        f.get_str("tokenizer.chat_template").unwrap()
    );
    assert_eq!(show["capabilities"][0], "completion");
    assert!(show["modelfile"]
        .as_str()
        .unwrap()
        .contains(&format!("FROM {}", s.engine.info.model_path)));
    let r = post(s.addr, "/api/show", &json!({"model": "llama3:8b"}));
    assert_eq!(r.status, 404);

    let ps = ok(get(s.addr, "/api/ps"));
    let p = &ps["models"][0];
    assert_eq!(p["name"], name(s).as_str());
    assert_eq!(p["context_length"], s.engine.info.context_length);
    assert_eq!(p["size_vram"], 0);
    assert_eq!(p["details"], m["details"]);
    let kv = (s.engine.info.num_blocks * s.engine.info.kv_block_bytes) as u64;
    assert_eq!(p["size"], size + kv);
}

#[test]
fn embed_gives_the_v1_vectors() {
    let Some(s) = server() else { return };
    let texts = ["The cat sat on the mat.", "Paris is the capital of France."];
    let v1 = post_ok(s.addr, "/v1/embeddings", &json!({"input": texts}));
    let e = post_ok(
        s.addr,
        "/api/embed",
        &json!({"model": name(s), "input": texts}),
    );
    let dims = s.engine.info.hidden_size;
    let embs = e["embeddings"].as_array().unwrap();
    assert_eq!(embs.len(), 2);
    for (i, emb) in embs.iter().enumerate() {
        assert_eq!(emb.as_array().unwrap().len(), dims);
        assert_eq!(emb, &v1["data"][i]["embedding"]);
    }
    assert_eq!(e["model"], name(s).as_str());
    assert_eq!(e["prompt_eval_count"], v1["usage"]["prompt_tokens"]);
    assert!(e["total_duration"].as_u64().unwrap() >= e["load_duration"].as_u64().unwrap());
    let one = post_ok(
        s.addr,
        "/api/embed",
        &json!({"model": name(s), "input": texts[0]}),
    );
    assert_eq!(one["embeddings"][0], v1["data"][0]["embedding"]);
    let legacy = post_ok(
        s.addr,
        "/api/embeddings",
        &json!({"model": name(s), "prompt": texts[1]}),
    );
    assert_eq!(legacy, json!({"embedding": v1["data"][1]["embedding"]}));
    let r = post(s.addr, "/api/embed", &json!({"model": name(s)}));
    assert_eq!(
        (r.status, r.json()),
        (400, json!({"error": "input: required, got nothing"}))
    );
}

#[test]
fn pull_streams_ollamas_progress_lines() {
    let Some(s) = server() else { return };
    let entry = folio_fetch::catalog::default_entry();
    if folio_fetch::state(entry) == folio_fetch::State::Missing {
        eprintln!(
            "SKIPPED: {} is not cached (a pull would download it)",
            entry.name
        );
        return;
    }
    let r = post(s.addr, "/api/pull", &json!({"model": entry.name}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    let lines: Vec<Value> = r
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let digest = format!("sha256:{}", entry.sha256);
    assert_eq!(
        lines,
        vec![
            json!({"status": "pulling manifest"}),
            json!({"status": format!("pulling {}", &entry.sha256[..12]), "digest": digest,
                   "total": entry.size, "completed": entry.size}),
            json!({"status": "verifying sha256 digest"}),
            json!({"status": "writing manifest"}),
            json!({"status": "success"}),
        ]
    );
    let v = post_ok(
        s.addr,
        "/api/pull",
        &json!({"model": format!("{}:latest", entry.name), "stream": false}),
    );
    assert_eq!(v, json!({"status": "success"}));
    // Ollama's spelling of the name (`smollm2:135m`) pulls the same entry.
    let (family, size) = entry
        .name
        .rsplit_once('-')
        .expect("a catalogue name ends -SIZE");
    let v = post_ok(
        s.addr,
        "/api/pull",
        &json!({"model": format!("{family}:{size}"), "stream": false}),
    );
    assert_eq!(v, json!({"status": "success"}));
}

/// The name a client pulled a catalogue model by (Ollama's spelling) reaches the served
/// model of that file, as `ollama pull X` then `ollama run X` expect.
#[test]
fn ollamas_spelling_of_a_catalogue_name_reaches_its_served_model() {
    let Some(s) = server() else { return };
    let served = std::path::Path::new(&s.engine.info.model_path)
        .canonicalize()
        .ok();
    let Some(entry) = folio_fetch::catalog::CATALOG
        .iter()
        .find(|e| folio_fetch::model_path(e).canonicalize().ok() == served)
    else {
        eprintln!("SKIPPED: the shared server serves no catalogue model's cached file");
        return;
    };
    let (family, size) = entry.name.rsplit_once('-').unwrap();
    let spelled = format!("{}:{}", family.to_uppercase(), size);
    assert_ne!(spelled, name(s));
    let show = post_ok(s.addr, "/api/show", &json!({"model": spelled}));
    let want = post_ok(s.addr, "/api/show", &json!({"model": name(s)}));
    assert_eq!(show["model_info"], want["model_info"]);
    let r = post_ok(
        s.addr,
        "/api/generate",
        &json!({"model": spelled, "prompt": "Hi", "stream": false,
                "options": {"num_predict": 2, "temperature": 0}}),
    );
    assert_eq!(r["done"], true, "{r}");
    assert!(r["eval_count"].as_u64().is_some_and(|n| n >= 1), "{r}");
    let r = post(s.addr, "/api/show", &json!({"model": "smollm9:135m"}));
    assert_eq!(r.status, 404, "{}", r.text());
}

#[test]
fn pull_and_delete_refusals() {
    let Some(s) = server() else { return };
    let names = folio_fetch::catalog::names();
    let cases = [
        ("POST", "/api/pull", json!({"model": "hf:bartowski"}), 400,
         "model: \"hf:bartowski\": a Hugging Face Hub name is hf:ORG/REPO or hf:ORG/REPO:QUANT (e.g. hf:ggml-org/gemma-3-1b-it-GGUF:Q4_K_M)".to_string()),
        ("DELETE", "/api/delete", json!({"model": "hf:bartowski/SmolLM2-135M-Instruct-GGUF"}), 400,
         format!("model: \"hf:bartowski/SmolLM2-135M-Instruct-GGUF\": Hugging Face Hub models live in the Hugging Face cache ($HF_HOME/hub); delete them with `hf cache delete`; folio deletes its catalogue models: {names}")),
        ("POST", "/api/pull", json!({"model": "llama3.2"}), 404,
         format!("model \"llama3.2\" is not in folio's catalogue ({names}); Ollama's registry is not used")),
        ("DELETE", "/api/delete", json!({"model": "llama3.2"}), 404,
         format!("model \"llama3.2\" is not in folio's catalogue ({names}); Ollama's registry is not used")),
    ];
    for (method, path, body, status, msg) in cases {
        let r = request(s.addr, method, path, body.to_string().as_bytes());
        assert_eq!(r.status, status, "{}", r.text());
        assert_eq!(r.json(), json!({"error": msg}));
    }
    let r = post(
        s.addr,
        "/api/copy",
        &json!({"source": "a", "destination": "b"}),
    );
    assert_eq!(r.status, 501);
    assert_eq!(
        r.json(),
        json!({"error": "/api/copy is not implemented by folio: it serves GGUF files as they are (no Modelfiles, blobs or registry pushes); use /api/pull for its catalogue models or `folio serve --model PATH`"})
    );
    // A catalogue model that is not on disk: 404 naming the missing file.
    if let Some(e) = folio_fetch::catalog::CATALOG
        .iter()
        .find(|e| !folio_fetch::model_path(e).exists())
    {
        let r = request(
            s.addr,
            "DELETE",
            "/api/delete",
            json!({"model": e.name}).to_string().as_bytes(),
        );
        assert_eq!(r.status, 404, "{}", r.text());
        assert_eq!(
            r.json(),
            json!({"error": format!("model {:?} not found: it is not downloaded ({} is absent)", e.name, folio_fetch::model_path(e).display())})
        );
    }
}

#[test]
fn pull_of_a_hub_name_from_the_hugging_face_cache_offline() {
    let Some(s) = server() else { return };
    // Only the Hub code reads these; the file is in the cache, so no request is made.
    let hf = std::env::temp_dir().join(format!("folio-ollama-hf-{}", std::process::id()));
    let repo = hf.join("hub").join("models--org--tiny-GGUF");
    let snap = repo.join("snapshots").join("c0ffee");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs").join("main"), "c0ffee").unwrap();
    std::fs::write(snap.join("tiny-Q4_K_M.gguf"), b"GGUF").unwrap();
    std::env::set_var("HF_HOME", &hf);
    std::env::remove_var("HF_HUB_CACHE");
    std::env::set_var("HF_HUB_OFFLINE", "1");
    let v = post_ok(
        s.addr,
        "/api/pull",
        &json!({"model": "hf:org/tiny-GGUF", "stream": false}),
    );
    assert_eq!(v, json!({"status": "success"}));
    let r = post(
        s.addr,
        "/api/pull",
        &json!({"model": "hf:org/tiny-GGUF:Q8_0"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let lines: Vec<Value> = r
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        vec![
            json!({"status": "pulling manifest"}),
            json!({"status": "success"})
        ]
    );
    let r = post(s.addr, "/api/pull", &json!({"model": "hf:org/absent-GGUF"}));
    let text = r.text();
    assert!(
        text.contains("pulling hf:org/absent-GGUF: hf:org/absent-GGUF: HF_HUB_OFFLINE is set, and no GGUF of org/absent-GGUF is in the Hugging Face cache"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&hf);
}
