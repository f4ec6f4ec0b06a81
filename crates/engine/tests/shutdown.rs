//! Shutdown cuts running streams with a reason of their own (not "cancelled" as a client
//! abort, nor a normal end), and refuses what arrives afterwards: both name the shutdown.

mod common;
use common::{collect, engine, greedy};
use folio_engine::{EngineConfig, Event, FinishReason};

#[test]
fn streams_cut_at_shutdown_end_with_shutting_down() {
    if let Err(e) = folio_fetch::test_model() {
        eprintln!("SKIPPED: no test model ({e:#})");
        return;
    }
    let h = engine(EngineConfig::default());
    let p = h
        .tokenizer
        .encode("Count from one to a thousand:", true)
        .unwrap();
    let mut s = h.submit(greedy(&p, 4000)).unwrap();
    // Wait until it is generating, then shut down.
    match s.next_blocking() {
        Some(Event::Tokens { .. }) => {}
        other => panic!("expected tokens first, got {other:?}"),
    }
    h.shutdown();
    let rest = collect(s);
    assert_eq!(rest.reason, FinishReason::ShuttingDown);
    assert_eq!(rest.reason.as_openai(), "abort");
    assert!(rest.usage.completion_tokens < 4000);
    // A request after the shutdown is refused with the same reason, or not taken at all:
    // refused at submit, or (sent in the instant the engine thread ends) its stream closes
    // with no event.
    match h.submit(greedy(&p, 4)) {
        Ok(mut s) => match s.next_blocking() {
            None => {}
            Some(Event::Finished { reason, .. }) => assert_eq!(reason, FinishReason::ShuttingDown),
            Some(other) => panic!("a request after shutdown ran: {other:?}"),
        },
        Err(e) => assert!(matches!(e, folio_engine::SubmitError::ShuttingDown), "{e}"),
    }
}
