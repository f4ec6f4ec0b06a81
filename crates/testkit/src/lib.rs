//! Helpers shared by folio's integration tests across crates (a dev-dependency only; never
//! published). One crate instead of source files included by path, so Cargo sees every dependency.
//!
//! - [`tiny`]: small synthetic GGUF models of every architecture (random weights, a
//!   byte-level vocabulary) for exact-token tests without a download.
//! - [`child`]: `folio serve` as a child process (its RSS, its flags), killed on drop.
//! - [`http`]: folio's server on the real test model on an ephemeral port, and a tiny
//!   blocking HTTP/1.1 client.
//! - [`temp`]: scratch directories removed when the test drops them.

pub mod child;
pub mod http;
pub mod temp;
pub mod tiny;
