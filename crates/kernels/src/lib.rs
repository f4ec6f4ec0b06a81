//! folio-kernels: folio's CPU compute kernels.
//!
//! # Layout
//! - [`cpu`]: runtime feature detection and the ISA choice (`FOLIO_ISA` may force a lower one).
//! - [`pool`]: a persistent thread pool; every parallel kernel runs on it.
//! - [`quant_act`]: activations to int8 blocks of 32 (ggml q8_1 numerics).
//! - [`lines`]: f32 buffers that start on a cache line (streamed matmul outputs).
//! - [`matmul`]: weight matrices repacked at load time and the batched quantized matmul
//!   (the kernel that decides folio's speed), in ggml's summation order or the faster
//!   block order ([`matmul::Sums`]).
//! - [`ops`]: rmsnorm, SwiGLU, rope, residual add.
//! - [`attn`]: KV storage formats (f16, bf16, q8_0, q4_0, iq4_nl, rotated q4h/q8h; K and V
//!   each its own) and the paged attention kernel
//!   that reads each format in place, with llama.cpp's softmax and summation orders.
//!
//! The arithmetic follows llama.cpp's on an AVX-512 CPU operation for operation (with
//! `Sums::Ggml`, bit for bit), so folio's outputs can be checked token for token against
//! llama.cpp's. Every SIMD kernel has a scalar reference computing the same bits and a test
//! comparing the two. The crate is
//! built without `target-cpu=native`: SIMD code lives in `#[target_feature]` functions
//! chosen at run time, so one binary runs on any x86-64 (and other targets get scalar).

pub mod attn;
pub mod cpu;
pub mod lines;
pub mod matmul;
pub mod ops;
pub mod pool;
pub mod quant_act;

pub use cpu::{CpuFeatures, Isa};
pub use matmul::{KernelError, QMatrix, WeightType};
pub use pool::ThreadPool;
