//! Hardware profiles: memory, bandwidth, peak FLOP/s, host link; built in or measured.

use serde::{Deserialize, Serialize};

use crate::error::{positive, PlanError, Result};
use crate::units::{GB, GIB, MIB};

/// An accelerator (or a CPU machine) as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HardwareProfile {
    pub name: String,
    pub memory_bytes: u64,
    /// Peak memory bandwidth (`β`), bytes/s.
    pub mem_bw_bytes_s: f64,
    /// Peak dense FLOP/s at the weight precision (`P`; BF16 with FP32 accumulate on GPUs).
    pub peak_flops: f64,
    /// Host link bandwidth per direction (PCIe, NVLink-C2C), bytes/s.
    pub host_link_bytes_s: f64,
    /// Board power limit, W (bounds the energy per result).
    #[serde(default)]
    pub power_w: Option<f64>,
    /// Memory shared by CPU and accelerator.
    #[serde(default)]
    pub unified_memory: bool,
}

/// RTX PRO 6000 Blackwell Workstation: the reference card (96 GB, 1792 GB/s, 503.8 TFLOP/s
/// BF16 dense, PCIe Gen5 x16 at 64 GB/s each way, 600 W).
pub fn rtx_pro_6000() -> HardwareProfile {
    HardwareProfile {
        name: "RTX-PRO-6000".into(),
        memory_bytes: (97_887.0 * MIB) as u64,
        mem_bw_bytes_s: 1792.0 * GB,
        peak_flops: 503.8e12,
        host_link_bytes_s: 64.0 * GB,
        power_w: Some(600.0),
        unified_memory: false,
    }
}

pub fn h100() -> HardwareProfile {
    HardwareProfile {
        name: "H100".into(),
        memory_bytes: (80.0 * GIB) as u64,
        mem_bw_bytes_s: 3350.0 * GB,
        peak_flops: 989.4e12,
        host_link_bytes_s: 64.0 * GB,
        power_w: Some(700.0),
        unified_memory: false,
    }
}

pub fn h200() -> HardwareProfile {
    HardwareProfile {
        name: "H200".into(),
        memory_bytes: (141.0 * GB) as u64,
        mem_bw_bytes_s: 4800.0 * GB,
        peak_flops: 989.4e12,
        host_link_bytes_s: 64.0 * GB,
        power_w: Some(700.0),
        unified_memory: false,
    }
}

/// A100-80GB SXM: PCIe Gen4 (32 GB/s each way), the reference "Gen4" case.
pub fn a100_80gb() -> HardwareProfile {
    HardwareProfile {
        name: "A100-80GB".into(),
        memory_bytes: (80.0 * GIB) as u64,
        mem_bw_bytes_s: 2039.0 * GB,
        peak_flops: 312e12,
        host_link_bytes_s: 32.0 * GB,
        power_w: Some(400.0),
        unified_memory: false,
    }
}

/// GH200: H100-class GPU with NVLink-C2C to the Grace CPU at 450 GB/s each way.
pub fn gh200() -> HardwareProfile {
    HardwareProfile {
        name: "GH200".into(),
        memory_bytes: (96.0 * GIB) as u64,
        mem_bw_bytes_s: 4000.0 * GB,
        peak_flops: 989.4e12,
        host_link_bytes_s: 450.0 * GB,
        power_w: Some(1000.0),
        unified_memory: false,
    }
}

/// Apple M2 Max with 96 GB unified memory (89.41 GiB), 400 GB/s.
pub fn m2_max() -> HardwareProfile {
    HardwareProfile {
        name: "M2-Max".into(),
        memory_bytes: (96.0 * GB) as u64,
        mem_bw_bytes_s: 400.0 * GB,
        peak_flops: 13.6e12,
        host_link_bytes_s: 400.0 * GB,
        power_w: Some(90.0),
        unified_memory: true,
    }
}

pub fn builtin_hardware() -> Vec<HardwareProfile> {
    vec![
        rtx_pro_6000(),
        h100(),
        h200(),
        a100_80gb(),
        gh200(),
        m2_max(),
    ]
}

impl HardwareProfile {
    pub fn validate(&self) -> Result<()> {
        positive("mem_bw_bytes_s", self.mem_bw_bytes_s)?;
        positive("peak_flops", self.peak_flops)?;
        positive("host_link_bytes_s", self.host_link_bytes_s)?;
        positive("memory_bytes", self.memory_bytes as f64)?;
        Ok(())
    }

    /// A built-in name (case-insensitive, `-`/`_`/space ignored) or a path to a machine
    /// profile JSON written by `folio profile` (see [`MachineProfile`]).
    pub fn resolve(name_or_path: &str) -> Result<Self> {
        let norm = |s: &str| {
            s.chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .collect::<String>()
                .to_lowercase()
        };
        if let Some(h) = builtin_hardware()
            .into_iter()
            .find(|h| norm(&h.name) == norm(name_or_path))
        {
            return Ok(h);
        }
        if std::path::Path::new(name_or_path).is_file() {
            return Ok(MachineProfile::from_json_file(name_or_path)?.hardware());
        }
        Err(PlanError::UnknownProfile {
            kind: "hardware",
            name: name_or_path.into(),
            known: builtin_hardware()
                .iter()
                .map(|h| h.name.to_lowercase())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// A measured decode-round fit `fixed + per_token·tokens + per_pair·pairs` (seconds), the
/// same shape as `folio_core::CostModel`, for one model on one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundFit {
    /// Model the fit was measured with (profile name or GGUF file name).
    #[serde(default)]
    pub model: Option<String>,
    pub fixed_s: f64,
    pub per_token_s: f64,
    #[serde(default)]
    pub per_pair_s: f64,
}

impl RoundFit {
    pub fn cost_model(&self) -> folio_core::CostModel {
        folio_core::CostModel {
            fixed_s: self.fixed_s,
            per_token_s: self.per_token_s,
            per_pair_s: self.per_pair_s,
        }
    }
}

/// "This machine, measured": the JSON file `folio profile` writes and `--hardware PATH`
/// reads. Required: `name`, `mem_bw_bytes_s`, `peak_flops`, `memory_bytes`. Optional:
/// `host_link_bytes_s` (defaults to `mem_bw_bytes_s`: a CPU's "host" is its own memory),
/// `power_w`, measured efficiencies `mbu`/`mfu` (fractions of the peaks achieved by decode
/// reads and prefill math), `round_overhead_s` (per-round time not explained by reads or
/// math: launches, threads, sync) and `decode_fit` (a measured round-time fit).
///
/// ```json
/// {"name": "this machine", "mem_bw_bytes_s": 2.0e10, "peak_flops": 4.0e11,
///  "memory_bytes": 25769803776, "mbu": 0.6, "mfu": 0.3, "round_overhead_s": 0.001,
///  "decode_fit": {"model": "SmolLM2-135M", "fixed_s": 0.01, "per_token_s": 0.0005,
///                 "per_pair_s": 1e-9}}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineProfile {
    pub name: String,
    pub mem_bw_bytes_s: f64,
    pub peak_flops: f64,
    pub memory_bytes: u64,
    #[serde(default)]
    pub host_link_bytes_s: Option<f64>,
    #[serde(default)]
    pub power_w: Option<f64>,
    #[serde(default)]
    pub threads: Option<u32>,
    #[serde(default)]
    pub mbu: Option<f64>,
    #[serde(default)]
    pub mfu: Option<f64>,
    #[serde(default)]
    pub round_overhead_s: Option<f64>,
    #[serde(default)]
    pub decode_fit: Option<RoundFit>,
}

impl MachineProfile {
    pub fn from_json_str(text: &str, path: &str) -> Result<Self> {
        let m: Self = serde_json::from_str(text).map_err(|source| PlanError::Json {
            path: path.into(),
            source,
        })?;
        m.validate()?;
        Ok(m)
    }

    pub fn from_json_file(path: &str) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| PlanError::Io {
            path: path.into(),
            source,
        })?;
        Self::from_json_str(&text, path)
    }

    pub fn validate(&self) -> Result<()> {
        positive("mem_bw_bytes_s", self.mem_bw_bytes_s)?;
        positive("peak_flops", self.peak_flops)?;
        positive("memory_bytes", self.memory_bytes as f64)?;
        for (field, v) in [("mbu", self.mbu), ("mfu", self.mfu)] {
            if let Some(v) = v {
                if !(v > 0.0 && v <= 1.0) {
                    return Err(PlanError::Invalid {
                        field,
                        value: v.to_string(),
                        why: "an efficiency must lie in (0, 1]",
                    });
                }
            }
        }
        if let Some(o) = self.round_overhead_s {
            if !(o.is_finite() && o >= 0.0) {
                return Err(PlanError::Invalid {
                    field: "round_overhead_s",
                    value: o.to_string(),
                    why: "must be a finite number of seconds, 0 or more",
                });
            }
        }
        Ok(())
    }

    pub fn hardware(&self) -> HardwareProfile {
        HardwareProfile {
            name: self.name.clone(),
            memory_bytes: self.memory_bytes,
            mem_bw_bytes_s: self.mem_bw_bytes_s,
            peak_flops: self.peak_flops,
            host_link_bytes_s: self.host_link_bytes_s.unwrap_or(self.mem_bw_bytes_s),
            power_w: self.power_w,
            unified_memory: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_builtin_loosely() {
        assert_eq!(
            HardwareProfile::resolve("rtx pro 6000").unwrap().name,
            "RTX-PRO-6000"
        );
        assert_eq!(
            HardwareProfile::resolve("a100_80gb").unwrap().name,
            "A100-80GB"
        );
        assert!(HardwareProfile::resolve("tpu9").is_err());
    }

    #[test]
    fn machine_profile_checks_fields() {
        let bad = r#"{"name":"x","mem_bw_bytes_s":0,"peak_flops":1,"memory_bytes":1}"#;
        let e = MachineProfile::from_json_str(bad, "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mem_bw_bytes_s"), "{e}");
        let bad = r#"{"name":"x","mem_bw_bytes_s":1,"peak_flops":1,"memory_bytes":1,"mbu":1.5}"#;
        let e = MachineProfile::from_json_str(bad, "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mbu") && e.contains("1.5"), "{e}");
    }
}
