//! The fused path's fixed-capacity self-attention cache (`model/fixed_cache.rs`), the shape a
//! replayed GPU step needs, against fairseq's growing one, through the whole beam search.

use crate::compute_type::{bundled_input, hub_run_cached, runs};

/// The fixed-capacity cache (`model/fixed_cache.rs`, the shape a replayed GPU step needs) against
/// the growing one on the tensor path: the same hypotheses, scores within 1e-5, on the bundled
/// model, every fixture and the multilingual models, at batch 8 with nbest 5 (batches shrink
/// across row buckets, beams reorder), in float32 and float16.
#[test]
fn the_fixed_capacity_cache_gives_the_growing_cache_s_hypotheses() {
    let runs = runs(bundled_input(10), 10, &[("bart", ("en", "de")), ("m2m", ("en", "de"))], 6);
    for compute_type in ["float32", "float16"] {
        let mut worst: f64 = 0.0;
        for (model, lang, text, lines) in &runs {
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            let (growing, _) = hub_run_cached(model, *lang, *text, &lines, compute_type, false, false);
            let (fixed, steps) = hub_run_cached(model, *lang, *text, &lines, compute_type, false, true);
            assert!(steps > 0, "{compute_type} {model}: no step kept a fixed-capacity cache");
            assert_eq!(fixed.len(), growing.len(), "{compute_type} {model}");
            assert!(!fixed.is_empty());
            for (a, b) in fixed.iter().zip(&growing) {
                assert_eq!(a.tokens, b.tokens, "{compute_type} {model}");
                worst = worst.max((a.score - b.score).abs() as f64);
            }
        }
        let limit = if compute_type == "float32" { 1e-5 } else { 1e-2 };
        assert!(worst < limit, "{compute_type}: scores moved by {worst:e}");
        eprintln!("{compute_type}: largest score difference {worst:e}");
    }
}
