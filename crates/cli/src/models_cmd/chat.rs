//! `folio run NAME` without a prompt: a chat in the terminal, as `ollama run`'s. Each line
//! typed at `>>> ` is a user turn answered with the whole conversation so far; `/clear`
//! forgets it, `/bye` or Ctrl-D leaves, Ctrl-C stops the answer being written (that turn
//! is then dropped from the conversation).

use super::answer::{Backend, Opts, Outcome};
use super::interrupt::CtrlC;
use anyhow::Result;
use folio_tokenizer::ChatMessage;
use std::io::{BufRead, Write};

const HELP: &str = "Available commands:
  /clear  Clear session context
  /bye    Exit
  /?      Help for a command
Ctrl-C stops an answer; Ctrl-D exits.
";

pub fn repl(rt: &tokio::runtime::Runtime, backend: &Backend, opts: &Opts) -> Result<()> {
    let mut ctrl_c = CtrlC::listen(rt);
    let mut history: Vec<ChatMessage> = Vec::new();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    loop {
        {
            let mut out = std::io::stdout().lock();
            write!(out, ">>> ")?;
            out.flush()?;
        }
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            // Ctrl-D (end of input).
            println!();
            return Ok(());
        }
        let line = line.trim();
        match line {
            "" => continue,
            "/bye" => return Ok(()),
            "/clear" => {
                history.clear();
                println!("Cleared session context");
                continue;
            }
            "/?" | "/help" => {
                print!("{HELP}");
                continue;
            }
            l if l.starts_with('/') => {
                println!("Unknown command '{l}'. Type /? for help");
                continue;
            }
            _ => {}
        }
        history.push(ChatMessage::new("user", line));
        let mut out = std::io::stdout().lock();
        let mut answering = ctrl_c.answering();
        let got = rt.block_on(backend.answer(&history, opts, &mut out, Some(&mut answering)));
        drop(answering);
        match got {
            Ok(Outcome::Done(text)) => {
                history.push(ChatMessage::new("assistant", text));
                writeln!(out)?;
            }
            Ok(Outcome::Stopped) => {
                history.pop();
            }
            Err(e) => {
                history.pop();
                drop(out);
                eprintln!("Error: {e:#}");
            }
        }
    }
}
