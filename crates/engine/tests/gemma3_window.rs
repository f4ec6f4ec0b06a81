//! Sliding-window KV as memory on Gemma 3 270M (fetched on first use): a 4,000-token
//! conversation holds far fewer KV blocks while it decodes than the same run with every
//! layer's KV kept (`swa_full`, llama.cpp's `--swa-full`, same block layout), and the
//! greedy output is the same token for token. The figure is the engine's
//! `kv_blocks_used` gauge, which `/metrics` exports as `folio_kv_blocks_used`.

mod greedy_ref;

use folio_engine::{spawn_engine, EngineConfig, Event, GenerateRequest};
use folio_gguf::GgufFile;
use folio_model::Model;
use folio_tokenizer::Tokenizer;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A multi-turn Gemma conversation of about `tokens` tokens, ending with the model's turn.
fn conversation(tok: &Tokenizer, tokens: usize) -> Vec<u32> {
    let facts = [
        "The harbour master logs every ship that enters before dawn.",
        "Ledgers from the old mill list flour, salt and lamp oil by the barrel.",
        "The north road floods each spring, so carts take the ridge path instead.",
        "Bells at the chapel ring twice at noon and once at dusk.",
    ];
    let mut text = String::from("<start_of_turn>user\nI will tell you about a town.");
    let mut turn = 0;
    while tok.encode(&text, true).expect("encode").len() < tokens {
        for f in &facts {
            text.push(' ');
            text.push_str(f);
        }
        turn += 1;
        text.push_str(&format!(
            "<end_of_turn>\n<start_of_turn>model\nNoted, part {turn}.<end_of_turn>\n<start_of_turn>user\nMore:"
        ));
    }
    text.push_str(" What floods each spring?<end_of_turn>\n<start_of_turn>model\n");
    tok.encode(&text, true).expect("encode")
}

/// Greedy output and the most KV blocks in use at any step while it ran.
fn run(
    model: Model,
    tok: Arc<Tokenizer>,
    path: &std::path::Path,
    prompt: &[u32],
    swa_full: bool,
) -> (Vec<u32>, usize, u64) {
    let cfg = EngineConfig {
        swa_full,
        ..EngineConfig::default()
    };
    let h = spawn_engine(model, tok, path, cfg).expect("engine");
    let mut req = GenerateRequest::new(prompt.to_vec(), 16);
    req.ignore_eos = true;
    let mut s = h.submit(req).expect("submit");
    let (mut ids, mut peak) = (Vec::new(), 0);
    while let Some(ev) = s.next_blocking() {
        peak = peak.max(h.metrics.kv_blocks_used.load(Relaxed));
        match ev {
            Event::Tokens { ids: t, .. } => ids.extend(t),
            // Generation streams carry no embedding.
            Event::Embedding { .. } => {}
            Event::Finished { .. } => break,
        }
    }
    let released = h.metrics.kv_window_released_blocks.load(Relaxed);
    h.shutdown();
    (ids, peak, released)
}

#[test]
fn gemma3_window_kv_holds_fewer_blocks_same_output() {
    let path = match greedy_ref::fetched("gemma3-270m") {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipping gemma3 window KV test: {why}");
            return;
        }
    };
    let f = GgufFile::open(&path).expect("open model");
    let tok = Arc::new(Tokenizer::from_gguf(&f).expect("tokenizer"));
    let prompt = conversation(&tok, 4000);
    assert!(
        (4000..4200).contains(&prompt.len()),
        "{} tokens",
        prompt.len()
    );
    let load = || Model::from_gguf(&f).expect("load model");
    let (win_ids, win_peak, released) = run(load(), tok.clone(), &path, &prompt, false);
    let (full_ids, full_peak, none) = run(load(), tok.clone(), &path, &prompt, true);
    eprintln!(
        "gemma3-270m, {} prompt tokens: peak KV blocks {win_peak} (window) vs {full_peak} \
         (swa_full), {released} window blocks released",
        prompt.len()
    );
    assert_eq!(win_ids, full_ids, "releasing window KV changed the output");
    assert_eq!(none, 0);
    // 3 full layers and 15 window layers (W = 512): ~252 full blocks + 5 × at most ~65
    // window blocks (a 512-token prefill chunk and the window behind it) against 6 × ~252
    // (every block holds 3 layers).
    assert!(released > 200, "{released}");
    assert!(
        win_peak * 2 < full_peak,
        "window KV holds {win_peak} blocks, swa_full {full_peak}"
    );
}
