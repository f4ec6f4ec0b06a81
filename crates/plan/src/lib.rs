//! folio-plan: DESIGN.md's arithmetic done before running anything — does it fit, can it
//! finish in time, what does a good result cost.
//!
//! Every analysis is a pure function returning a serializable struct; each struct renders to
//! [`Table`]s with one line saying which formula produced them. [`sections`] assembles them
//! into what `folio plan` prints, defaulting to the reference case (Qwen3-8B on an RTX PRO
//! 6000, 12 GiB of KV).
//!
//! # Layout
//!
//! - profiles: [`model`] (shapes → parameter and KV bytes), [`hardware`] (peaks, links, the
//!   measured machine profile JSON), [`KvFormat`] (KV formats, from folio-gguf), [`efficiency`] (the reference efficiency table's
//!   measured rounds and MFU, and interpolation over them).
//! - analyses: [`capacity`] (KV per token/request, capacity, sharing, paging, branches, LoRA),
//!   [`kv_fit`] (every KV format's bytes per token and requests of a context in the pool),
//!   [`roofline`] (`d(b,L)`, `b_KV`, bounds, MBU/MFU), [`schedule`] (folio-core's scheduler
//!   through its simulator), [`cache`] (`V_h`), [`compress`], [`offload`], [`spec`], [`desk`],
//!   [`serving`] (Little, goodput, Amdahl, cost), [`machine`] (predictions on a measured machine).
//! - output: [`table`], [`sections`].

pub mod cache;
pub mod capacity;
pub mod compress;
pub mod desk;
pub mod efficiency;
pub mod error;
pub mod hardware;
pub mod kv_fit;
pub mod machine;
pub mod model;
pub mod offload;
pub mod roofline;
pub mod schedule;
pub mod sections;
pub mod serving;
pub mod spec;
pub mod table;
pub mod units;

pub use error::{PlanError, Result};
/// The KV storage format, shared with the kernels (its sizes are ggml's block sizes).
pub use folio_gguf::{KvFormat, KvFormats};
pub use hardware::{HardwareProfile, MachineProfile, RoundFit};
pub use model::ModelProfile;
pub use sections::{render, render_json, run_all, run_section, PlanInput, Section, SectionOutput};
pub use table::Table;
