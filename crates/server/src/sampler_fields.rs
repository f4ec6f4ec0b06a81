//! llama-server's sampling fields: `typical_p`, `top_n_sigma`, `xtc_*`, `dry_*`,
//! `repeat_penalty` / `repeat_last_n`, `mirostat*` and `samplers` (their order), read onto
//! the engine's [`SamplingParams`] with llama-server's defaults.

use crate::error::ApiError;
use crate::fields::{show, Fields};
use folio_engine::sampler::{dry, Dry, Mirostat, Stage};
use folio_engine::SamplingParams;
use serde_json::Value;

/// Most `dry_sequence_breakers` per request, and their longest length in bytes.
pub const MAX_BREAKERS: usize = 16;
pub const MAX_BREAKER_LEN: usize = 64;

/// What the sampling fields ask for beyond [`SamplingParams`]: DRY's breakers as text (the
/// server turns them into token ids with the tokenizer, see [`resolve`]).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct DryBreakers(pub Vec<String>);

/// Reads the llama.cpp sampling fields into `s` (`ctx` bounds the lengths).
pub fn parse(f: &Fields, s: &mut SamplingParams, ctx: i64) -> Result<DryBreakers, ApiError> {
    if f.get("repetition_penalty").is_none() {
        if let Some(r) = f.number("repeat_penalty", 0.0, 10.0, true)? {
            s.repetition_penalty = r as f32;
        }
    }
    // -1: the whole output; 0: penalties off (llama.cpp).
    s.repeat_last_n = match f.int("repeat_last_n", -1, ctx)? {
        None | Some(-1) => None,
        Some(n) => Some(n as usize),
    };
    if let Some(p) = f.number("typical_p", 0.0, 1.0, false)? {
        s.typical_p = p as f32;
    }
    if let Some(n) = f.number("top_n_sigma", -1.0, 100.0, false)? {
        s.top_n_sigma = n as f32;
    }
    if let Some(p) = f.number("xtc_probability", 0.0, 1.0, false)? {
        s.xtc_probability = p as f32;
    }
    if let Some(t) = f.number("xtc_threshold", 0.0, 1.0, false)? {
        s.xtc_threshold = t as f32;
    }
    let multiplier = f
        .number("dry_multiplier", 0.0, 100.0, false)?
        .unwrap_or(0.0) as f32;
    let base = f.number("dry_base", 0.0, 100.0, false)?.unwrap_or(1.75) as f32;
    let allowed_length = f.int("dry_allowed_length", 0, ctx)?.unwrap_or(2) as usize;
    let penalty_last_n = match f.int("dry_penalty_last_n", -1, ctx)? {
        None | Some(-1) => None,
        Some(n) => Some(n as usize),
    };
    let breakers = match f.get("dry_sequence_breakers") {
        None => dry::DEFAULT_BREAKERS
            .iter()
            .map(|b| b.to_string())
            .collect(),
        Some(_) => f.strings("dry_sequence_breakers", MAX_BREAKERS, MAX_BREAKER_LEN)?,
    };
    if multiplier != 0.0 {
        s.dry = Some(Dry {
            multiplier,
            base,
            allowed_length,
            penalty_last_n,
            breakers: Vec::new().into(),
        });
    }
    match f.int("mirostat", 0, 2)? {
        None | Some(0) => {}
        Some(2) => {
            s.mirostat = Some(Mirostat {
                tau: f.number("mirostat_tau", 0.0, 100.0, false)?.unwrap_or(5.0) as f32,
                eta: f.number("mirostat_eta", 0.0, 1.0, false)?.unwrap_or(0.1) as f32,
            })
        }
        Some(m) => {
            return Err(ApiError::param(
                "mirostat",
                format!("only 0 (off) and 2 (Mirostat 2) are implemented by folio, got {m}"),
            ))
        }
    }
    s.order = order(f)?;
    Ok(DryBreakers(breakers))
}

/// `samplers`: a list of names (`["top_k", "temperature"]`) or llama.cpp's letters
/// (`"kt"`).
fn order(f: &Fields) -> Result<Option<Vec<Stage>>, ApiError> {
    let stages = match f.get("samplers") {
        None => return Ok(None),
        Some(Value::String(s)) => s
            .chars()
            .enumerate()
            .map(|(i, c)| {
                Stage::from_char(c).ok_or_else(|| {
                    ApiError::param(
                        "samplers",
                        format!("letter {i} {c:?} names no sampler (one of e d s k y p m x t), got {s:?}"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().and_then(Stage::from_name).ok_or_else(|| {
                    ApiError::param(
                        format!("samplers[{i}]"),
                        format!(
                            "must be one of penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature; got {}",
                            show(v)
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(v) => {
            return Err(ApiError::param(
                "samplers",
                format!("must be an array of sampler names or a string of letters, got {}", show(v)),
            ))
        }
    };
    Ok(Some(stages))
}

/// Turns DRY's breaker strings into the token ids that contain them.
pub fn resolve(s: &mut SamplingParams, breakers: &DryBreakers, tok: &folio_tokenizer::Tokenizer) {
    if let Some(d) = s.dry.as_mut() {
        d.breakers = dry::breaker_tokens(tok, &breakers.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(v: Value) -> Result<(SamplingParams, DryBreakers), String> {
        let o = v.as_object().unwrap().clone();
        let mut s = SamplingParams::default();
        let b = parse(&Fields::new(&o), &mut s, 4096).map_err(|e| e.message)?;
        Ok((s, b))
    }

    #[test]
    fn llama_server_fields_are_read() {
        let (s, b) = run(json!({"typical_p": 0.9, "top_n_sigma": 1.5, "xtc_probability": 0.5,
            "xtc_threshold": 0.2, "repeat_penalty": 1.1, "repeat_last_n": 64, "dry_multiplier": 0.8,
            "dry_base": 2, "dry_allowed_length": 3, "dry_penalty_last_n": -1,
            "dry_sequence_breakers": ["\n", "###"], "mirostat": 2, "mirostat_tau": 4, "mirostat_eta": 0.2,
            "samplers": ["dry", "top_k", "temp"]}))
        .unwrap();
        assert_eq!(
            (
                s.typical_p,
                s.top_n_sigma,
                s.xtc_probability,
                s.xtc_threshold,
                s.repetition_penalty
            ),
            (0.9, 1.5, 0.5, 0.2, 1.1)
        );
        assert_eq!(s.repeat_last_n, Some(64));
        let d = s.dry.unwrap();
        assert_eq!(
            (d.multiplier, d.base, d.allowed_length, d.penalty_last_n),
            (0.8, 2.0, 3, None)
        );
        assert_eq!(b.0, vec!["\n", "###"]);
        assert_eq!(s.mirostat, Some(Mirostat { tau: 4.0, eta: 0.2 }));
        assert_eq!(
            s.order,
            Some(vec![Stage::Dry, Stage::TopK, Stage::Temperature])
        );
        let (s, b) = run(json!({"samplers": "edkt"})).unwrap();
        assert_eq!(
            s.order,
            Some(vec![
                Stage::Penalties,
                Stage::Dry,
                Stage::TopK,
                Stage::Temperature
            ])
        );
        assert_eq!(b.0, vec!["\n", ":", "\"", "*"]);
        assert_eq!(s.dry, None);
        // `repetition_penalty` (read by `params`) wins over llama.cpp's name.
        let (s, _) = run(json!({"repeat_penalty": 1.3, "repetition_penalty": 1.2})).unwrap();
        assert_eq!(s.repetition_penalty, 1.0);
    }

    #[test]
    fn bad_values_name_the_field() {
        let cases = [
            (json!({"mirostat": 1}), "mirostat: only 0 (off) and 2 (Mirostat 2) are implemented by folio, got 1"),
            (json!({"samplers": "kq"}), "samplers: letter 1 'q' names no sampler (one of e d s k y p m x t), got \"kq\""),
            (json!({"samplers": ["top_k", "infill"]}), "samplers[1]: must be one of penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature; got string \"infill\""),
            (json!({"typical_p": 1.5}), "typical_p: must be in [0, 1], got 1.5"),
            (json!({"repeat_last_n": -2}), "repeat_last_n: must be an integer in [-1, 4096], got -2"),
        ];
        for (body, msg) in cases {
            assert_eq!(run(body).unwrap_err(), msg);
        }
    }
}
