//! The generator's bookkeeping checked against a fake Markov "model" and an independent,
//! unbatched, tensor-free beam search over the same table.

use super::*;

const V: i64 = 12;
const N_SRC: i64 = 5;

/// log p(next | source class, last token): a fixed table; the per-row source class is state
/// that must follow every reorder, exactly like an encoder output / incremental cache.
struct Markov {
    table: Tensor, // [N_SRC * V, V]
    rows: Option<Tensor>,
    bookkeeping: Bookkeeping,
}

const BOOKKEEPINGS: [Bookkeeping; 3] = [Bookkeeping::Tensors, Bookkeeping::Host, Bookkeeping::DeviceCandidates];

fn src_class(src: &[i64]) -> i64 {
    src.iter().filter(|&&t| t != 1).sum::<i64>() % N_SRC
}

impl Markov {
    fn new(seed: i64) -> Self {
        let logits = crate::testing::TestRng::new(seed as u64).randn([N_SRC * V, V]).g_mul_scalar(2.0);
        // make EOS likely enough that sentences finish at different steps
        let _ = logits.select(1, 2).g_add_scalar_(2.5);
        Markov { table: logits.log_softmax(-1, Kind::Float), rows: None, bookkeeping: Bookkeeping::Tensors }
    }
    fn table_vec(&self) -> Vec<f32> {
        Vec::<f32>::try_from(self.table.view([-1])).unwrap()
    }
}

impl StepModel for Markov {
    fn max_decoder_positions(&self) -> usize {
        1024
    }
    fn bookkeeping(&self) -> Bookkeeping {
        self.bookkeeping
    }
    fn begin(&mut self, src_tokens: &Tensor, new_order: &Tensor) -> Result<(), GenerateError> {
        let (b, s) = src_tokens.size2()?;
        let flat = Vec::<i64>::try_from(src_tokens.contiguous().view([-1]))?;
        let classes: Vec<i64> =
            (0..b as usize).map(|i| src_class(&flat[i * s as usize..(i + 1) * s as usize])).collect();
        self.rows = Some(Tensor::from_slice(&classes).index_select(0, new_order));
        Ok(())
    }
    fn reorder(&mut self, new_order: &Tensor) -> Result<(), GenerateError> {
        let rows = self.rows.as_ref().ok_or_else(|| bad("no batch"))?;
        self.rows = Some(rows.index_select(0, new_order));
        Ok(())
    }
    fn forward_decoder(
        &mut self,
        tokens: &Tensor,
        _t: f64,
        _a: bool,
    ) -> Result<(Tensor, Option<Tensor>), GenerateError> {
        let rows = self.rows.as_ref().ok_or_else(|| bad("no batch"))?;
        if rows.size()[0] != tokens.size()[0] {
            return Err(bad("state and tokens disagree on the number of rows"));
        }
        let last = tokens.select(1, tokens.size()[1] - 1);
        let idx = rows * V + last;
        Ok((self.table.index_select(0, &idx), None))
    }
}

/// Plain-Rust beam search for one sentence, written from fairseq's description.
fn naive(table: &[f32], class: i64, cfg: &GeneratorConfig, max_len: i64) -> Vec<Hypothesis> {
    let k = (cfg.beam_size as i64).min(V - 1) as usize;
    let (pad, eos, unk) = (1usize, 2usize, 3usize);
    // (tokens incl. BOS, cumulative scores per generated position)
    let mut beams: Vec<(Vec<i64>, Vec<f32>)> = vec![(vec![2], vec![]); k];
    let mut done: Vec<Hypothesis> = Vec::new();
    for step in 0..=max_len {
        let mut cands: Vec<(f32, usize, usize)> = Vec::new(); // score, beam, token
        let nb = if step == 0 { 1 } else { k };
        for (b, (toks, cum)) in beams.iter().enumerate().take(nb) {
            let last = *toks.last().unwrap() as usize;
            let row = &table[((class * V) as usize + last) * V as usize..][..V as usize];
            for (v, &logit) in row.iter().enumerate() {
                let mut lp = logit;
                if v == pad {
                    lp = f32::NEG_INFINITY;
                }
                if v == unk {
                    lp -= cfg.unk_penalty as f32;
                }
                if step >= max_len && v != eos {
                    lp = f32::NEG_INFINITY;
                }
                if step < cfg.min_len && v == eos {
                    lp = f32::NEG_INFINITY;
                }
                let s = if step == 0 { lp } else { lp + cum[step as usize - 1] };
                cands.push((s, b, v));
            }
        }
        cands.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then((a.1 * 1000 + a.2).cmp(&(b.1 * 1000 + b.2))));
        cands.truncate((2 * k).min(cands.len() - 1));
        for &(s, b, v) in cands.iter().take(k) {
            if v == eos && s != f32::NEG_INFINITY && done.len() < k {
                let (toks, cum) = &beams[b];
                let mut c = cum.clone();
                c.push(s);
                let pos: Vec<f32> = (0..c.len()).map(|i| if i == 0 { c[0] } else { c[i] - c[i - 1] }).collect();
                let mut t: Vec<i64> = toks[1..].to_vec();
                t.push(2);
                let score = if cfg.normalize_scores { s / ((step + 1) as f64).powf(cfg.len_penalty) as f32 } else { s };
                done.push(Hypothesis { tokens: t, score, positional_scores: pos, attention: None, alignment: None });
            }
        }
        if done.len() == k || step == max_len {
            break;
        }
        let next: Vec<(Vec<i64>, Vec<f32>)> = cands
            .iter()
            .filter(|&&(s, _, v)| !(v == eos && s != f32::NEG_INFINITY))
            .take(k)
            .map(|&(s, b, v)| {
                let (mut t, mut c) = beams[b].clone();
                t.push(v as i64);
                c.push(s);
                (t, c)
            })
            .collect();
        beams = next;
    }
    done.sort_by(|a, b| b.score.partial_cmp(&a.score).unwrap());
    done
}

fn sources() -> Vec<Vec<i64>> {
    // left-padded rows ending in EOS, different source classes
    vec![
        vec![1, 1, 7, 5, 2],
        vec![4, 9, 6, 8, 2],
        vec![1, 1, 1, 4, 2],
        vec![1, 6, 6, 10, 2],
        vec![1, 1, 11, 11, 2],
        vec![1, 1, 1, 5, 2],
    ]
}

fn batch(rows: &[Vec<i64>]) -> Tensor {
    let flat: Vec<i64> = rows.iter().flatten().copied().collect();
    Tensor::from_slice(&flat).view([rows.len() as i64, -1])
}

fn configs() -> Vec<GeneratorConfig> {
    let base = GeneratorConfig { max_len_b: 7, ..GeneratorConfig::default() };
    vec![
        GeneratorConfig { beam_size: 3, ..base.clone() },
        GeneratorConfig { beam_size: 4, len_penalty: 0.6, unk_penalty: 2.0, min_len: 3, ..base.clone() },
        GeneratorConfig { beam_size: 1, ..base.clone() },
        GeneratorConfig { beam_size: 5, normalize_scores: false, max_len_b: 4, ..base.clone() },
        GeneratorConfig { beam_size: 2, max_len_a: 1.5, max_len_b: 1, ..base },
    ]
}

#[test]
fn batched_generation_matches_the_naive_search_per_sentence() {
    let _rng = crate::testing::global_generator();
    let mut model = Markov::new(11);
    let table = model.table_vec();
    let srcs = sources();
    let mut hit_max = false;
    let mut early = false;
    for (cfg, bookkeeping) in configs().into_iter().flat_map(|c| BOOKKEEPINGS.map(|b| (c.clone(), b))) {
        model.bookkeeping = bookkeeping;
        let gen = SequenceGenerator::new(cfg.clone(), V as usize, Specials::default()).unwrap();
        let out = gen.generate(&mut model, &batch(&srcs)).unwrap();
        let max_len = gen.max_len(5, 1024);
        for (i, src) in srcs.iter().enumerate() {
            let want = naive(&table, src_class(src), &cfg, max_len);
            assert_eq!(out[i], want, "sentence {i}, {bookkeeping:?}, {cfg:?}");
            assert!(!out[i].is_empty());
            hit_max |= out[i].iter().any(|h| h.tokens.len() as i64 == max_len + 1);
            early |= out[i].iter().all(|h| (h.tokens.len() as i64) < max_len + 1);
            // alone in its own batch: the same hypotheses, bit for bit
            let alone = gen.generate(&mut model, &batch(std::slice::from_ref(src))).unwrap();
            assert_eq!(alone[0], out[i]);
        }
    }
    // both ways of finishing were exercised: at max_len, and early (sentence removed from batch)
    assert!(hit_max && early, "hit_max={hit_max} early={early}");
}

/// Where two candidates tie, the host search asks libtorch's topk, as the tensor search does:
/// all three bookkeepings give the same hypotheses. Greedy decoding tells each token as it is
/// chosen, every way.
#[test]
fn the_host_search_equals_the_tensor_search_on_ties_and_tells_greedy_tokens() {
    let _rng = crate::testing::global_generator();
    let mut model = Markov::new(2);
    // every row: two tokens tie for the best, the rest are equal too
    let flat = Tensor::full([N_SRC * V, V], -3.0, (Kind::Float, Device::Cpu));
    let _ = flat.narrow(1, 4, 2).fill_(-0.5);
    model.table = flat;
    for cfg in configs() {
        let gen = SequenceGenerator::new(cfg.clone(), V as usize, Specials::default()).unwrap();
        let mut told: [Vec<(usize, i64)>; 3] = Default::default();
        let mut out = Vec::new();
        for (i, bookkeeping) in BOOKKEEPINGS.into_iter().enumerate() {
            model.bookkeeping = bookkeeping;
            let mut tell = |row: usize, token: i64| told[i].push((row, token));
            let request = GenerateRequest { on_token: Some(&mut tell), ..Default::default() };
            out.push(gen.generate_with(&mut model, &batch(&sources()), request).unwrap());
        }
        assert!(out[1..].iter().all(|o| *o == out[0]), "{cfg:?}");
        assert!(told[1..].iter().all(|t| *t == told[0]), "{cfg:?}");
        assert_eq!(told[0].is_empty(), cfg.beam_size > 1);
    }
}

/// A NaN log-prob is −inf to every search (fairseq's `lprobs[lprobs != lprobs] = -inf`), also
/// where it falls on the unknown word, on EOS at `max_len`, or on padding.
#[test]
fn the_host_search_equals_the_tensor_search_over_nan_log_probs() {
    let _rng = crate::testing::global_generator();
    let mut model = Markov::new(5);
    let mut table = model.table.copy();
    for (token, every) in [(7i64, 3i64), (3, 2), (2, 5), (1, 1)] {
        let rows = Tensor::arange_start_step(0, N_SRC * V, every, (Kind::Int64, Device::Cpu));
        let _ = table.index_copy_(0, &rows, &table.index_select(0, &rows).index_fill(1, &Tensor::from_slice(&[token]), f64::NAN));
    }
    assert!(table.isnan().any().int64_value(&[]) != 0);
    model.table = table;
    for cfg in configs() {
        let gen = SequenceGenerator::new(cfg.clone(), V as usize, Specials::default()).unwrap();
        let mut out = Vec::new();
        for bookkeeping in BOOKKEEPINGS {
            model.bookkeeping = bookkeeping;
            out.push(gen.generate(&mut model, &batch(&sources())).unwrap());
        }
        assert!(out[1..].iter().all(|o| *o == out[0]), "{cfg:?}");
        assert!(out[0].iter().flatten().all(|h| h.score.is_finite()), "{cfg:?}");
    }
}

#[test]
fn scores_are_consistent_with_positional_scores() {
    let _rng = crate::testing::global_generator();
    let mut model = Markov::new(3);
    let cfg = GeneratorConfig { beam_size: 4, max_len_b: 9, ..GeneratorConfig::default() };
    let gen = SequenceGenerator::new(cfg, V as usize, Specials::default()).unwrap();
    let out = gen.generate(&mut model, &batch(&sources())).unwrap();
    let mut n = 0;
    for hypos in &out {
        assert_eq!(hypos.len(), 4);
        for w in hypos.windows(2) {
            assert!(w[0].score >= w[1].score);
        }
        for h in hypos {
            assert_eq!(*h.tokens.last().unwrap(), 2);
            assert!(h.tokens[..h.tokens.len() - 1].iter().all(|&t| t != 2 && t != 1));
            let sum: f32 = h.positional_scores.iter().sum();
            assert!((sum / h.tokens.len() as f32 - h.score).abs() < 1e-4, "{h:?}");
            n += 1;
        }
    }
    assert_eq!(n, 24);
}

#[test]
fn max_len_forces_eos_and_min_len_bans_it() {
    let _rng = crate::testing::global_generator();
    let mut model = Markov::new(5);
    for bookkeeping in BOOKKEEPINGS {
        model.bookkeeping = bookkeeping;
        let cfg = GeneratorConfig { beam_size: 2, max_len_b: 3, min_len: 3, ..GeneratorConfig::default() };
        let gen = SequenceGenerator::new(cfg, V as usize, Specials::default()).unwrap();
        for hypos in gen.generate(&mut model, &batch(&sources())).unwrap() {
            for h in hypos {
                assert!(h.tokens.len() >= 4 && h.tokens.len() <= 4, "{:?}", h.tokens);
            }
        }
        let cfg = GeneratorConfig { min_len: 9, max_len_b: 3, ..GeneratorConfig::default() };
        let gen = SequenceGenerator::new(cfg, V as usize, Specials::default()).unwrap();
        assert!(matches!(gen.generate(&mut model, &batch(&sources())), Err(GenerateError::InvalidOption(_))));
    }
}

#[test]
fn greedy_sampling_follows_the_argmax_path() {
    let _rng = crate::testing::global_generator();
    let mut model = Markov::new(9);
    let greedy = GeneratorConfig { beam_size: 1, max_len_b: 6, ..GeneratorConfig::default() };
    let sampling =
        GeneratorConfig { beam_size: 3, search: SearchStrategy::Sampling { topk: 1, topp: -1.0 }, ..greedy.clone() };
    let g = SequenceGenerator::new(greedy, V as usize, Specials::default()).unwrap();
    let s = SequenceGenerator::new(sampling, V as usize, Specials::default()).unwrap();
    let want = g.generate(&mut model, &batch(&sources())).unwrap();
    let got = s.generate(&mut model, &batch(&sources())).unwrap();
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(g.len(), 3);
        for h in g {
            assert_eq!(h.tokens, w[0].tokens);
            assert!((h.score - w[0].score).abs() < 1e-5);
        }
    }
}

#[test]
fn sampling_is_seed_reproducible() {
    let _rng = crate::testing::global_generator();
    let mut model = Markov::new(9);
    let cfg = GeneratorConfig {
        beam_size: 3,
        max_len_b: 6,
        search: SearchStrategy::Sampling { topk: -1, topp: 0.9 },
        ..GeneratorConfig::default()
    };
    let gen = SequenceGenerator::new(cfg, V as usize, Specials::default()).unwrap();
    tch::manual_seed(1);
    let a = gen.generate(&mut model, &batch(&sources())).unwrap();
    tch::manual_seed(1);
    let b = gen.generate(&mut model, &batch(&sources())).unwrap();
    assert_eq!(a, b);
    assert!(a.iter().all(|h| h.len() == 3));
}

#[test]
fn a_temperature_that_is_not_above_zero_is_refused() {
    for temperature in [0.0, -1.0, f64::NAN] {
        let cfg = GeneratorConfig { temperature, ..GeneratorConfig::default() };
        match SequenceGenerator::new(cfg, V as usize, Specials::default()) {
            Err(GenerateError::InvalidOption(e)) => {
                assert!(matches!(e, crate::generate::InvalidOption::Temperature));
                assert_eq!(e.to_string(), "temperature must be greater than 0");
            }
            other => panic!("temperature {temperature}: {:?}", other.map(|_| ())),
        }
    }
    let cfg = GeneratorConfig { temperature: 0.5, ..GeneratorConfig::default() };
    assert!(SequenceGenerator::new(cfg, V as usize, Specials::default()).is_ok());
}

/// `--no-repeat-ngram-size n`, n = 1..4, beam search (every bookkeeping) and sampling: by
/// default (fairseq 0.12.2 on the CPU) the same hypotheses, bit for bit, as without it; with
/// fairseq's CUDA kernel (`FairseqCuda`, beam search) no hypothesis repeats an n-gram (the BOS
/// counted), and n = 1 with an EOS BOS is refused instead of failing every sentence at max_len.
#[test]
fn no_repeat_ngram_changes_nothing_by_default_and_blocks_with_the_cuda_kernel_s_semantics() {
    let _rng = crate::testing::global_generator();
    let mut model = Markov::new(5);
    let srcs = sources();
    let searches = [SearchStrategy::Beam, SearchStrategy::Sampling { topk: -1, topp: -1.0 }];
    let mut cuda_changed = 0;
    for search in searches {
        for bookkeeping in BOOKKEEPINGS {
            model.bookkeeping = bookkeeping;
            // long hypotheses over 12 symbols: repeats are likely
            let base = GeneratorConfig { beam_size: 3, min_len: 7, max_len_b: 9, search, ..GeneratorConfig::default() };
            let run = |model: &mut Markov, cfg: GeneratorConfig| {
                tch::manual_seed(1);
                SequenceGenerator::new(cfg, V as usize, Specials::default()).unwrap().generate(model, &batch(&srcs))
            };
            let plain = run(&mut model, base.clone()).unwrap();
            for n in 1..=4 {
                let default = GeneratorConfig { no_repeat_ngram_size: n, ..base.clone() };
                assert_eq!(default.ngram_mode, NgramMode::FairseqCpu);
                assert_eq!(run(&mut model, default).unwrap(), plain, "n = {n}, {search:?}, {bookkeeping:?}");
                // (sampling with the kernel's bans can leave a row of 12 symbols nothing to draw,
                // as fairseq would: beam search only)
                if search != SearchStrategy::Beam {
                    continue;
                }
                let cuda = GeneratorConfig { no_repeat_ngram_size: n, ngram_mode: NgramMode::FairseqCuda, ..base.clone() };
                if n == 1 {
                    assert!(matches!(run(&mut model, cuda), Err(GenerateError::InvalidOption(_))));
                    continue;
                }
                let blocked = run(&mut model, cuda).unwrap();
                cuda_changed += usize::from(blocked != plain);
                for h in blocked.iter().flatten() {
                    // BOS, then the hypothesis without its final EOS (forced or chosen, it is
                    // never blocked by an earlier n-gram: EOS appears nowhere before it)
                    let mut toks = vec![2];
                    toks.extend_from_slice(&h.tokens[..h.tokens.len() - 1]);
                    let grams: Vec<&[i64]> = toks.windows(n).collect();
                    let distinct: std::collections::HashSet<&[i64]> = grams.iter().copied().collect();
                    assert_eq!(distinct.len(), grams.len(), "n = {n}: {toks:?}");
                }
            }
        }
    }
    assert!(cuda_changed > 0, "the kernel's blocking never changed a hypothesis: the test proves little");
}
