//! Many models behind one server, loaded on demand: the [`Registry`] of known models
//! (which are loaded, loading, unloaded; when to load and unload), a loaded model's
//! per-model state ([`Served`]: engine, served name, metrics; its LoRA adapters live in
//! its engine), the [`Lease`] a request holds on its model, and what a listing shows of
//! one ([`ModelEntry`]). `http` serves llama-server's router-mode endpoints; `metrics_page`
//! joins the models' `/metrics` pages.
//!
//! The single-model server (`folio serve --model X`) is a registry of one pinned model.

mod entry;
pub(crate) mod http;
mod lease;
pub(crate) mod metrics_page;
mod registry;
mod served;

pub use entry::{ModelEntry, ModelSource, ModelStatus};
pub use lease::Lease;
pub use registry::{Loader, Policy, Registry};
pub use served::Served;
