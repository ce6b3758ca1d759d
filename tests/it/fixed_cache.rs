//! The fused path's fixed-capacity self-attention cache (`model/fixed_cache.rs`), the shape a
//! replayed GPU step needs, against fairseq's growing one, through the whole beam search.

use crate::compute_type::{bundled_input, hub_run_cached, runs};
use crate::util::tolerance::{FIXED_CACHE_FLOAT16, FIXED_CACHE_FLOAT16_SAME_HYPOTHESES, FIXED_CACHE_FLOAT32};

/// The fixed-capacity cache (`model/fixed_cache.rs`) with every step's rows padded to the row
/// bucket (the shapes a replayed GPU step needs) against the growing cache on the tensor path,
/// on the bundled model, every fixture and the multilingual models, at batch 8 with nbest 5
/// (batches shrink across row buckets, beams reorder). float32: the same hypotheses, scores
/// within [`FIXED_CACHE_FLOAT32`]. float16, whose products round differently at another batch
/// shape: [`FIXED_CACHE_FLOAT16_SAME_HYPOTHESES`] of the hypotheses the same, scores within
/// [`FIXED_CACHE_FLOAT16`].
#[test]
fn the_fixed_capacity_cache_gives_the_growing_cache_s_hypotheses() {
    let runs = runs(bundled_input(10), 10, &[("bart", ("en", "de")), ("m2m", ("en", "de"))], 6);
    for compute_type in ["float32", "float16"] {
        let (mut worst, mut same, mut all): (f64, usize, usize) = (0.0, 0, 0);
        for (model, lang, text, lines) in &runs {
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            let (growing, _, _) = hub_run_cached(model, *lang, *text, &lines, compute_type, false, false);
            let (fixed, steps, shaped) = hub_run_cached(model, *lang, *text, &lines, compute_type, false, true);
            assert!(steps > 0, "{compute_type} {model}: no step kept a fixed-capacity cache");
            // every step at its bucket's shape (8 sentences × 5 beams: 40 rows padded to 64)
            assert_eq!(shaped, steps, "{compute_type} {model}: steps at a bucket's shape");
            assert_eq!(fixed.len(), growing.len(), "{compute_type} {model}");
            assert!(!fixed.is_empty());
            for (a, b) in fixed.iter().zip(&growing) {
                all += 1;
                if a.tokens == b.tokens {
                    same += 1;
                    worst = worst.max((a.score - b.score).abs() as f64);
                } else {
                    assert_eq!(compute_type, "float16", "{model}: {:?} against {:?}", a.tokens, b.tokens);
                }
            }
        }
        let tolerance = if compute_type == "float32" { FIXED_CACHE_FLOAT32 } else { FIXED_CACHE_FLOAT16 };
        assert!(tolerance.holds(worst), "{compute_type}: scores moved by {worst:e}");
        assert!(same as f64 >= all as f64 * FIXED_CACHE_FLOAT16_SAME_HYPOTHESES, "{compute_type}: {same} of {all} hypotheses the same");
        eprintln!("{compute_type}: {same} of {all} hypotheses the same, largest score difference {worst:e}");
    }
}

/// `TCHSEQ_KV_CACHE=fixed` (the GPU check's switch) reaches the model through `translate`: float16
/// on the CPU takes the fused path, whose steps then keep a fixed-capacity cache (the count the
/// run reports), and prints what it printed without; a value that names no cache kind is one
/// warning, and the cache grows.
#[test]
fn the_cache_kind_from_the_environment_reaches_translate() {
    let run = |cache: Option<&str>| {
        let mut cmd = crate::util::tchseq();
        cmd.args(["translate", "--compute-type", "float16", "--format", "fairseq", "--batch-size", "4", "-m"])
            .arg(crate::util::repo("weights/multi30k.en-de"))
            .arg("--input")
            .arg(crate::util::fixture("bundled/input.en"))
            .env_remove("TCHSEQ_KV_CACHE");
        if let Some(c) = cache {
            cmd.env("TCHSEQ_KV_CACHE", c);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{cache:?}: {}", String::from_utf8_lossy(&out.stderr));
        let hyps: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().filter(|l| l.starts_with("H-")).map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            format!("{}\t{}", f[0], f[2])
        }).collect();
        (hyps, String::from_utf8(out.stderr).unwrap())
    };
    let fixed_steps = |stderr: &str| -> usize {
        let counts: Vec<usize> = stderr
            .lines()
            .filter_map(|l| l.strip_prefix("TCHSEQ_KV_CACHE=fixed: "))
            .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(counts.len() <= 1, "{stderr}");
        counts.first().copied().unwrap_or(0)
    };
    let (growing, stderr) = run(None);
    assert_eq!(fixed_steps(&stderr), 0, "{stderr}");
    let (fixed, stderr) = run(Some("fixed"));
    assert!(!growing.is_empty());
    assert_eq!(fixed, growing);
    // every sentence takes at least as many steps as its hypothesis has tokens
    assert!(fixed_steps(&stderr) >= growing.len(), "{stderr}");
    assert!(!stderr.contains("not a cache kind"), "{stderr}");
    let (bogus, stderr) = run(Some("static"));
    assert_eq!(bogus, growing);
    assert_eq!(fixed_steps(&stderr), 0, "{stderr}");
    assert_eq!(stderr.lines().filter(|l| l.contains("TCHSEQ_KV_CACHE=\"static\": not a cache kind")).count(), 1, "{stderr}");
}
