//! vLLM's KV-event wire format: one `KVEventBatch` as msgpack, byte for byte what vLLM's
//! msgspec encoder writes (`vllm/distributed/kv_events.py`).
//!
//! The batch is a positional array `[ts, events, data_parallel_rank]` (`EventBatch` is an
//! `array_like` struct); each event is a map tagged by its class name under `"type"`
//! (`KVCacheEvent` has `tag=True`), fields in declaration order, and optional fields with
//! a default are left out when they hold it (`omit_defaults`). So a stored block is
//!
//! ```text
//! {"type": "BlockStored", "block_hashes": [..], "parent_block_hash": h | nil,
//!  "token_ids": [..], "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil}
//! ```
//!
//! NOTE: why this order and these values: `vllm-router`'s `kv_aware` policy decodes
//! exactly this (a batch that is a map, or an event that is an array, is dropped), re-hashes
//! each event's `token_ids` per block itself and uses `block_hashes` only as opaque keys
//! for parent links and removals. Hashes go out as msgpack integers (vLLM's
//! `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES` default); `medium` is `"GPU"` because that is the
//! tier a router credits fully (folio's KV is in host memory, but it is the serving tier).

use folio_engine::{KvCacheEvent, KvEventBatch};
use rmpv::Value;

/// The storage tier named in every event.
pub const MEDIUM: &str = "GPU";

/// The msgpack bytes of `batch` (vLLM's ZMQ payload frame), as data-parallel rank `rank`.
pub fn encode(batch: &KvEventBatch, rank: u32) -> Vec<u8> {
    let events = batch.events.iter().map(event).collect();
    let v = Value::Array(vec![
        Value::F64(batch.ts),
        Value::Array(events),
        Value::from(rank),
    ]);
    let mut out = Vec::with_capacity(64 + 8 * batch.events.len());
    rmpv::encode::write_value(&mut out, &v).expect("writing to a Vec cannot fail");
    out
}

fn event(e: &KvCacheEvent) -> Value {
    let s = |x: &str| Value::from(x);
    let hashes = |h: &[u64]| Value::Array(h.iter().map(|&x| Value::from(x)).collect());
    let opt = |o: Option<Value>| o.unwrap_or(Value::Nil);
    let fields: Vec<(Value, Value)> = match e {
        KvCacheEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            lora_id,
            lora_name,
        } => vec![
            (s("type"), s("BlockStored")),
            (s("block_hashes"), hashes(block_hashes)),
            (
                s("parent_block_hash"),
                opt(parent_block_hash.map(Value::from)),
            ),
            (
                s("token_ids"),
                Value::Array(token_ids.iter().map(|&t| Value::from(t)).collect()),
            ),
            (s("block_size"), Value::from(*block_size as u64)),
            (s("lora_id"), opt(lora_id.map(Value::from))),
            (s("medium"), s(MEDIUM)),
            (s("lora_name"), opt(lora_name.as_deref().map(Value::from))),
        ],
        KvCacheEvent::BlockRemoved { block_hashes } => vec![
            (s("type"), s("BlockRemoved")),
            (s("block_hashes"), hashes(block_hashes)),
            (s("medium"), s(MEDIUM)),
        ],
        KvCacheEvent::AllBlocksCleared => vec![(s("type"), s("AllBlocksCleared"))],
    };
    Value::Map(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_an_array_of_tagged_maps() {
        let batch = KvEventBatch {
            ts: 1.5,
            events: vec![
                KvCacheEvent::BlockStored {
                    block_hashes: vec![u64::MAX, 7],
                    parent_block_hash: None,
                    token_ids: vec![1, 2, 3, 4, 5, 6, 7, 8],
                    block_size: 4,
                    lora_id: Some(1),
                    lora_name: Some("a".into()),
                },
                KvCacheEvent::BlockRemoved {
                    block_hashes: vec![7],
                },
                KvCacheEvent::AllBlocksCleared,
            ],
        };
        // What msgspec 0.23 writes for the same batch of vLLM's structs (EventBatch
        // `array_like`, events tagged maps, `omit_defaults`), `msgspec.msgpack.encode(..).hex()`.
        let want = "93cb3ff80000000000009388a474797065ab426c6f636b53746f726564ac626c6f636b5f\
                    68617368657392cfffffffffffffffff07b1706172656e745f626c6f636b5f68617368c0\
                    a9746f6b656e5f696473980102030405060708aa626c6f636b5f73697a6504a76c6f7261\
                    5f696401a66d656469756da3475055a96c6f72615f6e616d65a16183a474797065ac426c\
                    6f636b52656d6f766564ac626c6f636b5f6861736865739107a66d656469756da3475055\
                    81a474797065b0416c6c426c6f636b73436c656172656400";
        let hex: String = encode(&batch, 0)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, want);
    }
}
