//! Ctrl-C in the interactive chat: while an answer runs it stops that answer; at the
//! prompt it says how to leave (as `ollama run` does) instead of killing the process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// Counts the Ctrl-Cs that arrived while an answer ran.
#[derive(Clone)]
pub struct CtrlC {
    presses: watch::Receiver<u64>,
    answering: Arc<AtomicBool>,
}

impl CtrlC {
    /// Takes over SIGINT for the rest of the process; the listener runs on `rt`'s workers,
    /// so it answers while the main thread waits for a line of input.
    pub fn listen(rt: &tokio::runtime::Runtime) -> CtrlC {
        let (tx, presses) = watch::channel(0u64);
        let answering = Arc::new(AtomicBool::new(false));
        let busy = answering.clone();
        rt.spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                if busy.load(Ordering::SeqCst) {
                    tx.send_modify(|n| *n += 1);
                } else {
                    use std::io::Write;
                    let mut out = std::io::stdout().lock();
                    let _ = write!(out, "\nUse Ctrl + d or /bye to exit.\n>>> ");
                    let _ = out.flush();
                }
            }
        });
        CtrlC { presses, answering }
    }

    /// Marks an answer as running until the guard drops; Ctrl-Cs from now on stop it.
    pub fn answering(&mut self) -> Answering<'_> {
        self.presses.borrow_and_update();
        self.answering.store(true, Ordering::SeqCst);
        Answering(self)
    }
}

/// An answer in progress (see [`CtrlC::answering`]).
pub struct Answering<'a>(&'a mut CtrlC);

impl Answering<'_> {
    /// Completes at the next Ctrl-C.
    pub async fn pressed(&mut self) {
        if self.0.presses.changed().await.is_err() {
            // The listener is gone: no Ctrl-C will come.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.answering.store(false, Ordering::SeqCst);
    }
}
