//! Element-wise and vector ops of a transformer block, all f32 unless noted.
//!
//! Each op has a scalar reference (`scalar`) and AVX-512 / AVX2 versions (`x86`); the
//! public functions dispatch on [`crate::cpu::isa`], the `*_with` forms take an explicit
//! ISA (tests compare every ISA with the scalar one).
//!
//! # Panics
//! On mismatched slice lengths (caller bugs).

mod activation;
mod gelu;
mod lowrank;
mod rope;
mod scalar;
mod swiglu_oai;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use activation::{gate_up_row, Activation};
pub use gelu::{gelu, gelu_f32, gelu_mul};
pub use lowrank::{lowrank_add, lowrank_add_with, MAX_RANK as LOWRANK_MAX_RANK};
pub use rope::{yarn_corr_dims, Rope, RopeRows, RopeScaling};
pub use swiglu_oai::{swiglu_oai_mul, SWIGLU_OAI_ALPHA, SWIGLU_OAI_LIMIT};

use crate::cpu::{isa, Isa};

/// Runs the first arm whose ISA the (clamped) request allows.
macro_rules! dispatch {
    ($isa:expr, $avx512:expr, $avx2:expr, $scalar:expr) => {{
        match $isa.clamp() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: clamp() guarantees the CPU supports the ISA.
            Isa::Avx512 => unsafe { $avx512 },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { $avx2 },
            _ => $scalar,
        }
    }};
}

/// `out = x / rms(x) * weight` for one row (`rms = sqrt(mean(x^2) + eps)`).
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    rmsnorm_with(isa(), x, weight, eps, out)
}

/// [`rmsnorm`] with an explicit ISA.
pub fn rmsnorm_with(isa: Isa, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    assert!(
        x.len() == weight.len() && out.len() == x.len(),
        "rmsnorm: x ({}), weight ({}) and out ({}) lengths differ",
        x.len(),
        weight.len(),
        out.len()
    );
    let s = scalar::ggml_rms_scale(x, eps);
    dispatch!(
        isa,
        x86::scale_mul_512(x, weight, s, out),
        x86::scale_mul_256(x, weight, s, out),
        scalar::rmsnorm(x, weight, eps, out)
    )
}

/// [`rmsnorm`] over consecutive rows of `weight.len()` values.
pub fn rmsnorm_rows(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    rmsnorm_rows_with(isa(), x, weight, eps, out)
}

/// [`rmsnorm_rows`] with an explicit ISA.
pub fn rmsnorm_rows_with(isa: Isa, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    assert!(
        d > 0 && x.len().is_multiple_of(d) && out.len() == x.len(),
        "rmsnorm_rows: x ({}) must be whole rows of weight.len() = {d}, out ({}) as long",
        x.len(),
        out.len()
    );
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        rmsnorm_with(isa, xr, weight, eps, or);
    }
}

/// `out = silu(gate) * up` (SwiGLU), `silu(g) = g / (1 + e^-g)` with llama.cpp's exp
/// approximation ([`crate::attn::expf_ggml`]), so its bits are llama.cpp's.
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    silu_mul_with(isa(), gate, up, out)
}

/// [`silu_mul`] with an explicit ISA.
pub fn silu_mul_with(isa: Isa, gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() == up.len() && gate.len() == out.len(),
        "silu_mul: gate, up and out lengths differ"
    );
    #[cfg(target_arch = "x86_64")]
    if isa.clamp() == Isa::Avx512 {
        // SAFETY: clamp() guarantees AVX-512; lengths checked above.
        return unsafe { x86::silu_mul_512(gate, up, out) };
    }
    // NOTE: no hand-written AVX2 form of llama.cpp's AVX-512 exp approximation (it scales
    // with `vscalefps`): the scalar reference, compiled with FMA, computes the same bits.
    #[cfg(target_arch = "x86_64")]
    if isa.clamp() == Isa::Avx2 {
        // SAFETY: clamp() guarantees AVX2 and FMA.
        return unsafe { x86::silu_mul_fma(gate, up, out) };
    }
    scalar::silu_mul(gate, up, out)
}

/// `x += y`.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    add_inplace_with(isa(), x, y)
}

/// [`add_inplace`] with an explicit ISA.
pub fn add_inplace_with(isa: Isa, x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len(), "add_inplace: lengths differ");
    dispatch!(
        isa,
        x86::add_512(x, y),
        x86::add_256(x, y),
        scalar::add_inplace(x, y)
    )
}
