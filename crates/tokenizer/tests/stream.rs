//! Streaming pieces: IncrementalDecoder over byte tokens, StopMatcher over chunks.

mod common;

use std::sync::Arc;

use common::*;
use folio_tokenizer::{IncrementalDecoder, StopMatcher, StopOutput, Tokenizer};

fn tiny() -> Arc<Tokenizer> {
    Arc::new(Tokenizer::from_spec(tiny_spec()).unwrap())
}

fn ids_of(bytes: &[u8]) -> Vec<u32> {
    bytes.iter().map(|&b| byte_id(b)).collect()
}

#[test]
fn emoji_split_over_byte_tokens_is_emitted_once_complete() {
    let mut dec = IncrementalDecoder::new(tiny(), true);
    let crab = ids_of("🦀".as_bytes());
    assert_eq!(crab.len(), 4);
    assert_eq!(dec.push(crab[0]), "");
    assert_eq!(dec.push(crab[1]), "");
    assert_eq!(dec.push(crab[2]), "");
    assert_eq!(dec.push(crab[3]), "🦀");
    assert_eq!(dec.push(G_THE), " the");
    assert_eq!(dec.flush(), "");
}

#[test]
fn stream_equals_full_decode_without_replacement_chars() {
    let tok = tiny();
    let text = "a 🦀 世界 naïve 👨‍👩‍👧!";
    let mut ids = vec![BOS];
    ids.extend(ids_of(text.as_bytes()));
    ids.push(END);
    let mut dec = IncrementalDecoder::new(tok.clone(), true);
    let mut chunks = Vec::new();
    for &id in &ids {
        chunks.push(dec.push(id));
    }
    chunks.push(dec.flush());
    assert!(chunks.iter().all(|c| !c.contains('\u{FFFD}')), "{chunks:?}");
    assert_eq!(chunks.concat(), tok.decode(&ids, true));
    assert_eq!(chunks.concat(), text);

    // Without skipping, control tokens come out as their text.
    let mut dec = IncrementalDecoder::new(tok, false);
    assert_eq!(dec.push(BOS), "<s>");
}

#[test]
fn invalid_bytes_become_replacement_chars_and_flush_is_lossy() {
    let mut dec = IncrementalDecoder::new(tiny(), true);
    // 0xFF can never start a char: replaced at once, the text after it still flows.
    assert_eq!(dec.push(byte_id(0xFF)), "\u{FFFD}");
    assert_eq!(dec.push(byte_id(b'x')), "x");
    // A lead byte followed by a non-continuation byte: the lead byte is invalid.
    assert_eq!(dec.push(byte_id(0xE4)), "");
    assert_eq!(dec.push(byte_id(b'y')), "\u{FFFD}y");
    // An incomplete char at the end of the stream.
    assert_eq!(dec.push(byte_id(0xF0)), "");
    assert_eq!(dec.push(byte_id(0x9F)), "");
    assert_eq!(dec.flush(), "\u{FFFD}");
    assert_eq!(dec.flush(), "");
}

#[test]
fn a_cut_mid_character_drops_the_incomplete_bytes() {
    let mut dec = IncrementalDecoder::new(tiny(), true);
    assert_eq!(dec.push(byte_id(b'a')), "a");
    // The first two bytes of a four-byte emoji, then the stream is cut (a length limit).
    assert_eq!(dec.push(byte_id(0xF0)), "");
    assert_eq!(dec.push(byte_id(0x9F)), "");
    assert_eq!(dec.discard_incomplete(), 2);
    assert_eq!(dec.flush(), "", "nothing left to turn into U+FFFD");
}

fn out(text: &str, stopped: bool) -> StopOutput {
    StopOutput {
        text_to_emit: text.into(),
        stopped,
    }
}

#[test]
fn stop_string_split_across_chunks_is_never_emitted() {
    let mut m = StopMatcher::new(["<|end|>", "\n\nUser:"]);
    assert_eq!(m.push("Hello <"), out("Hello ", false));
    assert_eq!(m.push("|e"), out("", false));
    assert_eq!(m.push("nd|> tail"), out("", true));
    assert!(m.is_stopped());
    assert_eq!(m.push("more"), out("", true));
    assert_eq!(m.flush(), "");
}

#[test]
fn false_alarm_prefix_is_released_when_it_stops_matching() {
    let mut m = StopMatcher::new(["\n\nUser:"]);
    assert_eq!(m.push("line\n"), out("line", false));
    assert_eq!(m.push("\nUs"), out("", false));
    assert_eq!(m.push("ually"), out("\n\nUsually", false));
    assert_eq!(m.push(" ok\n\nUser"), out(" ok", false));
    assert_eq!(m.flush(), "\n\nUser");
}

#[test]
fn earliest_stop_wins_and_text_before_it_is_emitted() {
    let mut m = StopMatcher::new(["b", "abc", ""]);
    assert_eq!(m.push("xxab"), out("xxa", true));

    let mut m = StopMatcher::new(["END"]);
    assert_eq!(m.push("done.END and more"), out("done.", true));
}

#[test]
fn multibyte_prefixes_are_held_at_char_boundaries() {
    let mut m = StopMatcher::new(["世界"]);
    assert_eq!(m.push("你好世"), out("你好", false));
    assert_eq!(m.push("纪"), out("世纪", false));
    assert_eq!(m.push("世"), out("", false));
    assert_eq!(m.push("界!"), out("", true));

    let mut m = StopMatcher::new(Vec::<String>::new());
    assert_eq!(m.push("anything"), out("anything", false));
    assert_eq!(m.flush(), "");
}
