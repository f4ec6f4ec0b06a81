//! Runs the CLI's `bench serve`, `bench plot` and `profile` commands without the `folio`
//! binary (the same source file, crates/cli/src/bench_cmd.rs), so this crate can be
//! exercised on its own: `cargo run --release -p folio-bench --example folio_bench_cli -- serve …`.

#[path = "../../cli/src/bench_cmd.rs"]
mod bench_cmd;

use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)]
enum Cmd {
    #[command(flatten)]
    Bench(bench_cmd::BenchServeCmds),
    Profile(bench_cmd::ProfileArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Bench(bench_cmd::BenchServeCmds::Serve(a)) => bench_cmd::run_serve(a),
        Cmd::Bench(bench_cmd::BenchServeCmds::Plot(a)) => bench_cmd::run_plot(a),
        Cmd::Profile(a) => bench_cmd::run_profile(a),
    }
}
