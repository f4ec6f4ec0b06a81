//! `folio profile`: this machine, measured (DESIGN.md §serving, the efficiency table of DESIGN.md §roofline).
//!
//! 1. [`probe::read_bandwidth`]: a STREAM-like read of a buffer far larger than the caches
//!    (β); [`probe::matmul_flops`]: the Q4_1 matmul kernel at a large batch (P).
//! 2. [`rounds::decode_round`] times decode rounds of b sequences at context L directly on
//!    the model (no scheduler, no HTTP); [`rounds::prefill`] times one prefill.
//! 3. The table: bytes read per round (weights + b·L·k), the bound bytes/β, the measured
//!    round, MBU = bound/measured, and prefill MFU = FLOPs/(time·P).
//! 4. [`fit`]: a least-squares fit of round time vs new tokens and attention pairs (the
//!    planner's `decode_fit`), and the `MachineProfile` the planner loads.

pub mod fit;
pub mod peak;
pub mod probe;
pub mod rounds;
pub mod run;

pub use run::{run, ProfileOptions, ProfileReport};
