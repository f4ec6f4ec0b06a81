//! folio's measurement tools: the method is to measure before choosing.
//!
//! # Layout
//!
//! Load generator (`folio bench serve`), for any OpenAI-compatible server:
//! - [`workload`]: prompts generated locally (random, shared-prefix, multi-turn agent replay,
//!   retrieval with known answers), as conversations of one or more turns;
//! - [`arrivals`]: scheduled arrival times (Poisson, gamma burstiness, all at once);
//! - [`client`]: a small HTTP/1.1 client over tokio that streams SSE events with timestamps;
//! - [`runner`]: sends the workload on schedule, one [`record::RequestRecord`] per turn;
//! - [`record`], [`stats`], [`slo`], [`report`]: per-request latencies measured from the
//!   scheduled arrival, percentiles, goodput, the table and the JSON result file;
//! - [`prom`]: reads the server's `/metrics` counters (prefix-cache hits and queries).
//! - [`replicas`]: behind a router, each replica's requests and prefix-cache hit rate.
//! - [`failures`]: the verdict on failed requests (a run with any fails the command).
//!
//! Quality study (`folio bench quality`, DESIGN.md §compression): [`quality`] builds the fixed
//! retrieval task set, asks each configuration (KV format × attention precision, or a
//! server) every task at each concurrency level, and compares the right/wrong grids.
//!
//! Plots (`folio bench plot`): [`plot`] draws SVG line charts from result files, and the
//! quality grid from a quality result file.
//!
//! Step profiler (`folio profile`): [`profile`] probes memory bandwidth and matmul FLOP/s,
//! times decode rounds and prefills of the model directly, prints the MBU/MFU table and
//! builds the planner's `MachineProfile`.

pub mod arrivals;
pub mod client;
mod error;
pub mod failures;
pub mod inproc;
pub mod plot;
pub mod profile;
pub mod prom;
pub mod quality;
pub mod record;
pub mod replicas;
pub mod report;
pub mod runner;
pub mod slo;
pub mod stats;
pub mod workload;

pub use error::{BenchError, Result};
pub use record::RequestRecord;
pub use report::{ResultFile, RunReport};
pub use slo::Slo;
pub use stats::{percentile, Summary};
