//! The model as a library: loading reports, incremental decoding, dtypes, encoder paths.

use indexmap::IndexMap;
use tch::{Device, Kind, Tensor};
use tchseq::checkpoint::{load_checkpoint, load_tensor_dict};
use tchseq::model::{EncoderPath, IncrementalState, ModelError, TransformerModel};

use crate::verify::{fixtures, Fixture};

use crate::util::max_abs;

/// How far `ours` is outside verify's documented tolerance, |ours - theirs| <= 1e-5 + 1e-5 * |theirs|
/// (<= 0: inside).
fn allclose_excess(ours: &Tensor, theirs: &Tensor) -> f64 {
    if ours.numel() == 0 {
        return f64::NEG_INFINITY;
    }
    let (a, b) = (ours.to_kind(Kind::Double), theirs.to_kind(Kind::Double));
    use crate::util::tolerance::{ACTIVATION, ACTIVATION_RELATIVE};
    ((&a - &b).abs() - (b.abs() * ACTIVATION_RELATIVE + ACTIVATION.limit)).max().double_value(&[])
}

fn golden(f: &Fixture, side: &str) -> IndexMap<String, Tensor> {
    load_tensor_dict(&f.golden(side)).unwrap()
}

fn load(f: &Fixture, kind: Kind) -> TransformerModel {
    let ckpt = load_checkpoint(&f.checkpoint).unwrap();
    TransformerModel::from_state_dict(&ckpt.config, &ckpt.state_dict, Device::Cpu, kind).unwrap().0
}

/// Logits of decoding `tokens` one step at a time: `[B, T, V]`.
fn step_by_step(model: &TransformerModel, tokens: &Tensor, enc: &tchseq::model::EncoderOut) -> Tensor {
    let mut state = IncrementalState::new();
    let steps: Vec<Tensor> = (0..tokens.size()[1])
        .map(|t| model.decoder.forward(&tokens.narrow(1, 0, t + 1), Some(enc), Some(&mut state), false, false).unwrap().logits)
        .collect();
    Tensor::cat(&steps, 1)
}

/// Step-by-step decoding of the golden batch equals a full-sequence pass at every real target
/// position. fairseq's full pass attends through SDPA while its decoding steps use its own bmm
/// path; fairseq 0.12.2 itself shows up to 1.1e-5 between those two on these batches (our
/// numbers are the same), so the 1e-5 check is against a full pass on the bmm path, and the
/// SDPA difference is reported.
#[test]
fn incremental_decoding_matches_full_sequence_logits() {
    crate::util::set_test_threads();
    for f in fixtures() {
        let name = &f.name;
        let mut model = load(&f, Kind::Float);
        for side in ["left", "right"] {
            let g = golden(&f, side);
            let prev = &g["prev_output_tokens"];
            let keep = prev.ne(1).unsqueeze(-1);
            let enc = model.encoder.forward(&g["src_tokens"], false).unwrap();
            let steps = step_by_step(&model, prev, &enc);
            model.decoder.torch_self_attention = false;
            let full_bmm = model.decoder.forward(prev, Some(&enc), None, false, false).unwrap().logits;
            model.decoder.torch_self_attention = true;
            let full_sdpa = model.decoder.forward(prev, Some(&enc), None, false, false).unwrap().logits;
            let diff = max_abs(&steps.multiply(&keep), &full_bmm.multiply(&keep));
            let excess = allclose_excess(&steps.multiply(&keep), &full_bmm.multiply(&keep));
            assert!(excess <= 0.0, "{name} {side}: incremental vs full max abs diff {diff}, outside 1e-5 + 1e-5*|x| by {excess}");
            let sdpa = max_abs(&steps.multiply(&keep), &full_sdpa.multiply(&keep));
            eprintln!("{name} {side}: incremental vs full-sequence logits, max abs diff {diff:e} (SDPA full pass: {sdpa:e})");
        }
    }
}

/// End to end, from the golden's tokens alone: our encoder and decoder's logits and
/// log-probabilities against fairseq's own (verify's `logits` / `lprobs`), at every real target
/// position, within the drift of fp32 rounding compounded over the layers.
#[test]
fn end_to_end_logits_match_fairseq_s() {
    use crate::util::tolerance::END_TO_END_LOGIT;
    crate::util::set_test_threads();
    let mut compared = 0;
    for f in fixtures() {
        let model = load(&f, Kind::Float);
        for side in ["left", "right"] {
            let g = golden(&f, side);
            let prev = &g["prev_output_tokens"];
            let keep = prev.ne(1).unsqueeze(-1);
            let enc = model.encoder.forward(&g["src_tokens"], false).unwrap();
            let logits = model.decoder.forward(prev, Some(&enc), None, false, false).unwrap().logits;
            let lprobs = tchseq::model::get_normalized_probs(&logits, true);
            for (name, ours) in [("logits", &logits), ("lprobs", &lprobs)] {
                let theirs = &g[name];
                assert_eq!(ours.size(), theirs.size(), "{} {side} {name}", f.name);
                let (a, b) = (ours.multiply(&keep).to_kind(Kind::Double), theirs.multiply(&keep).to_kind(Kind::Double));
                let beyond = ((&a - &b).abs() - b.abs() * 1e-5).max().double_value(&[]).max(0.0);
                assert!(END_TO_END_LOGIT.holds(beyond), "{} {side} {name}: {beyond:e} beyond 1e-5 relative", f.name);
                compared += 1;
            }
        }
    }
    // 6 fixtures + 3 wild checkpoints, 2 sides, logits and lprobs
    assert_eq!(compared, 9 * 2 * 2);
}

/// Beam search's access pattern: encoder_out expanded to 2 rows per sentence (with different
/// prefixes), a reorder inside each sentence, then a batch that shrinks. Every row must get
/// the logits the same row gets when decoded without any reordering.
#[test]
fn reordering_the_incremental_state_follows_the_rows() {
    crate::util::set_test_threads();
    for f in fixtures() {
        let name = &f.name;
        let model = load(&f, Kind::Float);
        let g = golden(&f, "left");
        let (src, prev) = (&g["src_tokens"], &g["prev_output_tokens"]);
        let (bsz, tgt_len) = prev.size2().unwrap();
        let options = (Kind::Int64, Device::Cpu);
        let expand = Tensor::arange(bsz, options).repeat_interleave_self_int(2, 0, None);
        let enc0 = model.encoder.forward(src, false).unwrap().reorder(&expand);
        // the second row of each sentence decodes the next sentence's target
        let shifted = Tensor::arange(bsz, options).roll([-1], [0]);
        let tokens0 = Tensor::stack(&[prev.shallow_clone(), prev.index_select(0, &shifted)], 1).view([2 * bsz, tgt_len]);
        let unordered = step_by_step(&model, &tokens0, &enc0);

        let swap = Tensor::arange(2 * bsz, options).view([bsz, 2]).flip([1]).reshape([-1]);
        let (mut tokens, mut enc, mut order) = (tokens0.shallow_clone(), enc0, Tensor::arange(2 * bsz, options));
        let mut state = IncrementalState::new();
        let (mut worst, mut excess, mut compared) = (0f64, f64::NEG_INFINITY, 0);
        for step in 0..tgt_len {
            let new_order = match step {
                2 => Some(swap.shallow_clone()),
                // the first sentence finished: keep the other rows
                4 => Some(Tensor::arange_start(2, 2 * bsz, options)),
                _ => None,
            };
            if let Some(new_order) = new_order {
                state.reorder(&new_order).unwrap();
                tokens = tokens.index_select(0, &new_order);
                enc = enc.reorder(&new_order);
                order = order.index_select(0, &new_order);
            }
            let out = model.decoder.forward(&tokens.narrow(1, 0, step + 1), Some(&enc), Some(&mut state), false, false).unwrap();
            let expected = unordered.select(1, step).index_select(0, &order);
            let real = tokens.select(1, step).ne(1).unsqueeze(-1);
            compared += real.sum(Kind::Int64).int64_value(&[]);
            let (ours, theirs) = (out.logits.select(1, 0).multiply(&real), expected.multiply(&real));
            worst = worst.max(max_abs(&ours, &theirs));
            excess = excess.max(allclose_excess(&ours, &theirs));
        }
        assert!(compared > 2 * tgt_len, "{name}: compared only {compared} rows");
        assert!(excess <= 0.0, "{name}: reordered vs unreordered decoding max abs diff {worst}, outside 1e-5 + 1e-5*|x|");
        eprintln!("{name}: reordered incremental decoding vs unreordered, max abs diff {worst:e} over {compared} rows");
    }
}

#[test]
fn loading_reports_unused_and_rejects_missing_or_misshapen_keys() {
    let f = fixtures().into_iter().next().unwrap();
    let ckpt = load_checkpoint(&f.checkpoint).unwrap();
    let (cfg, sd) = (&ckpt.config, &ckpt.state_dict);
    let (_, report) = TransformerModel::from_state_dict(cfg, sd, Device::Cpu, Kind::Float).unwrap();
    assert!(report.unused_keys.is_empty(), "{report:?}");

    let mut extra: IndexMap<String, Tensor> = sd.iter().map(|(k, v)| (k.clone(), v.shallow_clone())).collect();
    extra.insert("encoder.layers.0.bogus".into(), Tensor::zeros([2], (Kind::Float, Device::Cpu)));
    let (_, report) = TransformerModel::from_state_dict(cfg, &extra, Device::Cpu, Kind::Float).unwrap();
    assert_eq!(report.unused_keys, ["encoder.layers.0.bogus"]);

    let mut missing: IndexMap<String, Tensor> = sd.iter().map(|(k, v)| (k.clone(), v.shallow_clone())).collect();
    missing.shift_remove("decoder.layers.0.fc1.weight");
    match TransformerModel::from_state_dict(cfg, &missing, Device::Cpu, Kind::Float) {
        Err(ModelError::MissingKey(k)) => assert_eq!(k, "decoder.layers.0.fc1.weight"),
        other => panic!("expected a missing key, got {:?}", other.map(|(_, r)| r)),
    }

    let mut misshapen: IndexMap<String, Tensor> = sd.iter().map(|(k, v)| (k.clone(), v.shallow_clone())).collect();
    let fc1 = misshapen["encoder.layers.0.fc1.bias"].narrow(0, 0, 3);
    misshapen.insert("encoder.layers.0.fc1.bias".into(), fc1);
    let err = TransformerModel::from_state_dict(cfg, &misshapen, Device::Cpu, Kind::Float).unwrap_err();
    assert!(matches!(err, ModelError::Shape { ref key, .. } if key == "encoder.layers.0.fc1.bias"), "{err}");
}

#[test]
fn out_of_vocabulary_tokens_are_an_error_not_a_panic() {
    let f = fixtures().into_iter().next().unwrap();
    let model = load(&f, Kind::Float);
    let src = Tensor::from_slice(&[5i64, 100_000, 2]).view([1, 3]);
    let err = model.encoder.forward(&src, false).unwrap_err();
    assert!(matches!(err, ModelError::Input(_)), "{err}");
    let float = Tensor::zeros([1, 3], (Kind::Float, Device::Cpu));
    assert!(matches!(model.encoder.forward(&float, false), Err(ModelError::Input(_))));
}

/// fairseq 0.12.2 runs post-norm relu encoders through torch._transformer_encoder_layer_fwd;
/// this measures what the regular layer code would have given instead.
#[test]
fn encoder_fast_path_is_mirrored_and_its_effect_measured() {
    crate::util::set_test_threads();
    let Some(f) = fixtures().into_iter().find(|f| f.entry["encoder_attention_path"]["left"] == "fast_bt") else {
        panic!("no fixture takes the encoder fast path");
    };
    let name = &f.name;
    let mut model = load(&f, Kind::Float);
    for side in ["left", "right"] {
        let g = golden(&f, side);
        let keep = g["src_tokens"].ne(1).transpose(0, 1).unsqueeze(-1);
        let (fast, path) = model.encoder.forward_with_path(&g["src_tokens"], false).unwrap();
        assert_ne!(path, EncoderPath::Regular);
        let (ours, theirs) = (fast.encoder_out.multiply(&keep), g["encoder_out"].multiply(&keep));
        let fast_diff = max_abs(&ours, &theirs);
        assert!(allclose_excess(&ours, &theirs) <= 0.0, "{name} {side}: fast path off by {fast_diff}");
        model.encoder.allow_fastpath = false;
        let (regular, path) = model.encoder.forward_with_path(&g["src_tokens"], false).unwrap();
        model.encoder.allow_fastpath = true;
        assert_eq!(path, EncoderPath::Regular);
        let diff = max_abs(&regular.encoder_out.multiply(&keep), &g["encoder_out"].multiply(&keep));
        assert!(crate::util::tolerance::REGULAR_PATH.holds(diff), "{name} {side}: the regular path is off by {diff}");
        eprintln!("{name} {side}: fast path off by {fast_diff:e}; regular instead of fast path changes encoder_out by {diff:e}");
    }
}

#[test]
fn half_and_bfloat16_models_run_close_to_f32() {
    let f = fixtures().into_iter().next().unwrap();
    let name = &f.name;
    let g = golden(&f, "right");
    let real = g["prev_output_tokens"].ne(1);
    let golden_best = g["lprobs"].argmax(-1, false).masked_select(&real);
    for (kind, tolerance) in [(Kind::Half, crate::util::tolerance::HALF_LOG_PROB), (Kind::BFloat16, crate::util::tolerance::BFLOAT16_LOG_PROB)] {
        let model = load(&f, kind);
        let enc = model.encoder.forward(&g["src_tokens"], false).unwrap();
        assert_eq!(enc.encoder_out.kind(), kind);
        let dec = model.decoder.forward(&g["prev_output_tokens"], Some(&enc), None, true, false).unwrap();
        let lprobs = tchseq::model::get_normalized_probs(&dec.logits, true);
        assert_eq!(lprobs.kind(), Kind::Float);
        let keep = real.unsqueeze(-1);
        let diff = max_abs(&lprobs.multiply(&keep), &g["lprobs"].multiply(&keep));
        let best = lprobs.argmax(-1, false).masked_select(&real);
        let agree = best.eq_tensor(&golden_best).to_kind(Kind::Double).mean(Kind::Double).double_value(&[]);
        assert!(tolerance.holds(diff) && agree >= crate::util::tolerance::HALF_ARGMAX_AGREEMENT, "{name} {kind:?}: lprobs off by {diff} (limit {}), argmax agrees on {agree}", tolerance.limit);
        eprintln!("{name} {kind:?}: lprobs max abs diff to the f32 golden {diff:e}, argmax agreement {agree}");
    }
}
