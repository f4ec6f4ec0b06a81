//! `folio bench model --capacity` on a tiny model: the engine's pool and folio-core's
//! scheduler hold exactly as many requests as `folio plan` counts, per KV format.

use folio_bench::inproc::capacity::measure;
use folio_engine::EngineConfig;
use folio_gguf::{GgmlType, GgufFile, KvFormat, KvFormats};
use folio_model::Model;
use folio_testkit::tiny::{build, Shape};

/// 2 layers, 2 KV heads of 64: f16 K 512 B + V 512 B per token.
const SHAPE: Shape = Shape {
    d: 128,
    heads: 2,
    kv_heads: 2,
    hd: 64,
    ffn: 128,
    vocab: 64,
    layers: 2,
    ctx: 256,
};

#[test]
fn the_pool_holds_what_plan_counts() {
    let f = GgufFile::from_bytes(build(&SHAPE, "llama", GgmlType::F32, 1)).expect("tiny gguf");
    let model = Model::from_gguf(&f).expect("tiny model");
    // 1 MiB of KV, 16-token blocks; each request reaches 128 tokens (97 prompt + 32
    // generated − 1): 8 blocks at its longest.
    let cfg = EngineConfig {
        kv_cache_bytes: 1 << 20,
        ..EngineConfig::default()
    };
    let mixed = KvFormats {
        k: KvFormat::Q8_0,
        v: KvFormat::Q4h,
    };
    // (formats, bytes per token, pool blocks, requests = floor(blocks / 8)):
    // f16 1,024 B → 64 blocks; q4h 2·2·(36 + 36) = 288 B → 227; q8_0:q4h 2·2·(68 + 36) = 416 B → 157.
    for (formats, bpt, blocks, fit) in [
        (KvFormats::same(KvFormat::F16), 1024, 64, 8),
        (KvFormats::same(KvFormat::Q4h), 288, 227, 28),
        (mixed, 416, 157, 19),
    ] {
        let r = measure(&model, &cfg, formats, 128, 32, fit + 4).expect("measure");
        let what = r.kv_format.clone();
        assert_eq!((r.bytes_per_token, r.pool_blocks), (bpt, blocks), "{what}");
        // Reserve-final admission: exactly the count of whole final lengths in the pool.
        assert_eq!(r.reserve_final, fit, "{what}");
        // On demand admits by the prompt's blocks (7), more than fit at full length, and
        // preempts the newest as they grow.
        assert!(r.on_demand >= r.reserve_final, "{what}: {}", r.on_demand);
        assert!(r.on_demand_preemptions > 0, "{what}");
    }
    assert_eq!(
        (measure(&model, &cfg, mixed, 128, 32, 1)
            .unwrap()
            .k_bytes_per_token),
        2 * 2 * 68
    );
    assert!(measure(&model, &cfg, mixed, 128, 0, 1).is_err());
    // A request longer than the whole pool is refused, naming its length.
    let e = measure(&model, &cfg, KvFormat::F16.into(), 2048, 1, 1).unwrap_err();
    assert!(e.to_string().contains("2048"), "{e}");
}
