//! Benchmarks that run folio's model in this process (no HTTP, no server): the library
//! side of `folio bench model`, `lora`, `spec` and `engine`, kept here so the `folio` binary only parses flags and
//! prints, and the measurements live next to the profiler whose rounds they reuse.

pub mod capacity;
pub mod engine;
pub mod lora;
pub mod model;
pub mod spec;
