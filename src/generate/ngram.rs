//! `--no-repeat-ngram-size` (fairseq's `NGramRepeatBlock`, `ngram_repeat_block.py`).
//!
//! fairseq 0.12.2 has two implementations of it and they disagree. `SequenceGenerator` calls the
//! blocker once per step, after the length and prefix masks and before the search, with
//! `tokens` = the **whole** `[rows, max_len + 2]` buffer (BOS at column 0, the hypothesis so far
//! in columns `1..=step`, `<pad>` after it), not `tokens[:, :step + 1]`:
//!
//! * its Python code, `_no_repeat_ngram` (what runs unless the optional CUDA extension
//!   `fairseq.ngram_repeat_block_cuda` was compiled at install time *and* CUDA is available, so
//!   on every CPU and with the PyPI package): for `step + 2 - n >= 0`, each row's n-gram to check
//!   is `row[-(n - 1):]`, the tail of the whole buffer, compared with `row[i : i + n - 1]` for
//!   `i < step + 2 - n`. At n = 1, `row[-0:]` is the whole row (`max_len + 2 >= 2` tokens), which
//!   never equals the empty slice: nothing is banned. At n >= 2 the tail ends with column
//!   `max_len + 1`, which is `<pad>` at every step (it would be written only after the last
//!   one), so it matches only a row whose hypothesis holds `<pad>` there, and `<pad>` is -inf at
//!   every step: only a hypothesis already at -inf, which no ban can change. So on the CPU
//!   `--no-repeat-ngram-size` changes no output, at any n and any step.
//! * its CUDA kernel (`banRepeatedTokens`): the n-gram to check is the last `n - 1` tokens of
//!   the hypothesis (`tokens[row, step + 2 - n ..= step]`, BOS counted), and each earlier
//!   occurrence bans the token that followed it. At n = 1 every token so far is banned, the BOS
//!   included; where the BOS is EOS (translation, and language models without
//!   `--add-bos-token`) no hypothesis can end, and fairseq fails every sentence at `max_len`
//!   (`AssertionError` in `_generate`).
//!
//! [`NgramMode::FairseqCpu`] (the default) computes what the Python code computes, on the same
//! buffer; [`NgramMode::FairseqCuda`] what the kernel computes, and refuses n = 1 with an EOS BOS.

use tch::Tensor;

use super::GenerateError;
use crate::generate::InvalidOption;

/// Which of fairseq 0.12.2's two n-gram blockers `--no-repeat-ngram-size n` reproduces
/// (`--ngram-blocking`; the server's and Python's `ngram_blocking`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NgramMode {
    /// fairseq 0.12.2's Python blocker, which it runs on the CPU and wherever its CUDA extension
    /// is not built: compared against the pad-filled end of the token buffer, it bans nothing
    /// a hypothesis can be affected by, at any n.
    #[default]
    FairseqCpu,
    /// fairseq's CUDA extension kernel (and, read from its source, fairseq <= 0.10.2's Python
    /// code, which took the n-gram from the hypothesis itself): a token that would complete an
    /// n-gram already in the hypothesis (the BOS counts) is banned. n = 1 is refused where the BOS is EOS: it would ban EOS forever.
    FairseqCuda,
}

/// `NGramRepeatBlock(n)` with the chosen semantics.
#[derive(Debug, Clone, Copy)]
pub struct NgramRepeatBlock {
    pub size: usize,
    pub mode: NgramMode,
}

impl NgramRepeatBlock {
    /// The blocker for `--no-repeat-ngram-size size`, or `None` where it can never ban a token:
    /// size 0 (fairseq builds none), and size 1 in [`NgramMode::FairseqCpu`] (the whole buffer
    /// is compared with an empty slice).
    pub fn new(size: usize, mode: NgramMode) -> Option<Self> {
        match (size, mode) {
            (0, _) | (1, NgramMode::FairseqCpu) => None,
            _ => Some(NgramRepeatBlock { size, mode }),
        }
    }

    /// Why this blocker cannot run on hypotheses that start with `bos`: fairseq's kernel at
    /// n = 1 bans the BOS, and a BOS that is EOS lets no hypothesis end.
    pub fn check_bos(&self, bos: i64, eos: i64) -> Result<(), GenerateError> {
        if self.mode == NgramMode::FairseqCuda && self.size == 1 && bos == eos {
            return Err(InvalidOption::UnigramBlocksEos.into());
        }
        Ok(())
    }

    /// Bans, in place, what fairseq's blocker bans at `step`. `tokens` is the generator's whole
    /// `[rows, max_len + 2]` buffer, as fairseq passes it; positions `0..=step` are filled.
    pub fn apply(&self, tokens: &Tensor, lprobs: &mut Tensor, step: i64) -> Result<(), GenerateError> {
        let n = self.size as i64;
        let check_start_pos = step + 2 - n;
        if n == 0 || check_start_pos < 0 {
            return Ok(());
        }
        let size = tokens.size();
        let (rows, width) = (size[0], size[1]);
        let prefix = host_rows(tokens, 0, step + 1)?;
        let hyp_len = (step + 1) as usize;
        let mut banned_rows = Vec::new();
        let mut banned_tokens = Vec::new();
        match self.mode {
            NgramMode::FairseqCpu => {
                // `row[-(n - 1):]`: at n = 1 the whole row, and never more than the row
                let tail_len = if n == 1 { width } else { (n - 1).min(width) };
                // each `row[i : i + n - 1]` (i < step + 2 - n) lies within the row: n - 1 tokens
                if tail_len != n - 1 {
                    return Ok(());
                }
                let tail = host_rows(tokens, width - tail_len, tail_len)?;
                let t = tail_len as usize;
                for row in 0..rows as usize {
                    let toks = &prefix[row * hyp_len..(row + 1) * hyp_len];
                    for t_banned in banned_by_tail(toks, &tail[row * t..(row + 1) * t], check_start_pos as usize) {
                        banned_rows.push(row as i64);
                        banned_tokens.push(t_banned);
                    }
                }
            }
            NgramMode::FairseqCuda => {
                for row in 0..rows as usize {
                    for t in banned_for_row(&prefix[row * hyp_len..(row + 1) * hyp_len], self.size) {
                        banned_rows.push(row as i64);
                        banned_tokens.push(t);
                    }
                }
            }
        }
        if banned_rows.is_empty() {
            return Ok(());
        }
        let r = Tensor::from_slice(&banned_rows).f_to_device(lprobs.device())?;
        let t = Tensor::from_slice(&banned_tokens).f_to_device(lprobs.device())?;
        let value = Tensor::from(f32::NEG_INFINITY).f_to_kind(lprobs.kind())?.f_to_device(lprobs.device())?;
        let _ = lprobs.f_index_put_(&[Some(r), Some(t)], &value, false)?;
        Ok(())
    }
}

/// Columns `start..start + len` of every row of `tokens`, row after row, on the host.
fn host_rows(tokens: &Tensor, start: i64, len: i64) -> Result<Vec<i64>, GenerateError> {
    let part = tokens.f_narrow(1, start, len)?.f_contiguous()?;
    Ok(Vec::<i64>::try_from(part.f_view([-1])?)?)
}

/// fairseq 0.12.2's Python loop for one row: `row[i + n - 1]` for every `i < check_start_pos`
/// with `row[i : i + n - 1] == ngram_to_check` (`n - 1 = ngram_to_check.len()`, and every such
/// window lies within `toks`).
fn banned_by_tail(toks: &[i64], ngram_to_check: &[i64], check_start_pos: usize) -> Vec<i64> {
    let k = ngram_to_check.len();
    (0..check_start_pos).filter(|&i| toks[i..i + k] == *ngram_to_check).map(|i| toks[i + k]).collect()
}

/// fairseq's CUDA kernel for one row, given the hypothesis so far `toks` (BOS first): for every
/// earlier position `i` whose `n - 1` tokens equal the last `n - 1` tokens of `toks`, the token
/// at `i + n - 1`.
fn banned_for_row(toks: &[i64], n: usize) -> Vec<i64> {
    let len = toks.len();
    if n == 0 || len + 1 < n {
        return Vec::new();
    }
    let check_start_pos = len + 1 - n;
    let suffix = &toks[check_start_pos..];
    (0..check_start_pos).filter(|&i| toks[i..i + n - 1] == *suffix).map(|i| toks[i + n - 1]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    const PAD: i64 = 1;
    const EOS: i64 = 2;
    const V: i64 = 12;

    /// fairseq 0.12.2's `_no_repeat_ngram`, transcribed with Python's slicing rules (a negative
    /// start counts from the end; `-0` is 0; a slice stops at the end of the list): the banned
    /// `(row, token)` pairs for `tokens` (whole rows) at `step`.
    fn python_no_repeat_ngram(tokens: &[Vec<i64>], step: i64, n: i64) -> Vec<(usize, i64)> {
        let mut banned = Vec::new();
        if step + 2 - n < 0 {
            return banned;
        }
        let check_start_pos = (step + 2 - n) as usize;
        let k = (n - 1) as usize;
        for (r, row) in tokens.iter().enumerate() {
            // row[-(n - 1):], where row[-0:] is the whole row
            let start = if n == 1 { 0 } else { row.len().saturating_sub(k) };
            let ngram_to_check = &row[start..];
            for i in 0..check_start_pos {
                // row[i : i + n - 1]
                if ngram_to_check == &row[i.min(row.len())..(i + k).min(row.len())] {
                    banned.push((r, row[i + k]));
                }
            }
        }
        banned
    }

    /// fairseq's CUDA kernel `banRepeatedTokens`, thread by thread: thread `col` of row `row`
    /// compares `tokens[col + k]` with `tokens[step - n + 2 + k]` for `k < n - 1`.
    fn cuda_kernel(tokens: &[Vec<i64>], step: i64, n: i64) -> Vec<(usize, i64)> {
        let threads = step - n + 2;
        let mut banned = Vec::new();
        if threads <= 0 {
            return banned;
        }
        for (r, row) in tokens.iter().enumerate() {
            for col in 0..threads as usize {
                if (0..(n - 1) as usize).all(|k| row[col + k] == row[threads as usize + k]) {
                    banned.push((r, row[col + (n - 1) as usize]));
                }
            }
        }
        banned
    }

    /// Runs `apply` at `step` on `rows` (whole buffer rows) and returns the `(row, token)` pairs
    /// set to -inf.
    fn applied(block: Option<NgramRepeatBlock>, rows: &[Vec<i64>], step: i64) -> Vec<(usize, i64)> {
        let width = rows[0].len() as i64;
        let flat: Vec<i64> = rows.concat();
        let tokens = Tensor::from_slice(&flat).view([rows.len() as i64, width]);
        let mut lprobs = Tensor::zeros([rows.len() as i64, V], (Kind::Float, Device::Cpu));
        if let Some(b) = block {
            b.apply(&tokens, &mut lprobs, step).unwrap();
        }
        let v = Vec::<f32>::try_from(lprobs.view([-1])).unwrap();
        let mut out: Vec<(usize, i64)> =
            v.iter().enumerate().filter(|(_, x)| x.is_infinite()).map(|(i, _)| (i / V as usize, (i % V as usize) as i64)).collect();
        out.sort();
        out
    }

    fn distinct(mut v: Vec<(usize, i64)>) -> Vec<(usize, i64)> {
        v.sort();
        v.dedup();
        v
    }

    /// A generator's buffer: BOS = EOS, then `hyp`, then pad up to `max_len + 2`.
    fn buffer(hyp: &[i64], max_len: usize) -> Vec<i64> {
        let mut row = vec![EOS];
        row.extend_from_slice(hyp);
        row.resize(max_len + 2, PAD);
        row
    }

    /// Hypotheses that repeat a unigram, a bigram, a trigram and a 4-gram: what the CUDA kernel
    /// (the old default) bans in them, and fairseq 0.12.2's CPU blocking (the default) does not.
    fn repeating() -> Vec<Vec<i64>> {
        vec![vec![5, 6, 5, 6, 5, 6, 5, 6], vec![4, 7, 8, 9, 4, 7, 8, 9, 4, 7, 8], vec![10, 10, 10, 10, 10, 10, 10, 10], vec![3, 11, 6, 3, 11, 6, 3, 11]]
    }

    #[test]
    fn the_default_is_fairseq_0_12_2_on_the_cpu_which_bans_nothing_at_any_size_and_step() {
        assert_eq!(NgramMode::default(), NgramMode::FairseqCpu);
        assert_eq!(crate::generate::GeneratorConfig::default().ngram_mode, NgramMode::FairseqCpu);
        let max_len = 20;
        let rows: Vec<Vec<i64>> = repeating().iter().map(|h| buffer(h, max_len)).collect();
        // every row's hypothesis reaches column `step` (as in the generator, whose rows are all
        // `step` tokens long)
        let shortest = repeating().iter().map(Vec::len).min().unwrap() as i64;
        for n in 1..=4 {
            let default = NgramRepeatBlock::new(n, NgramMode::default());
            let cuda = NgramRepeatBlock::new(n, NgramMode::FairseqCuda);
            let mut cuda_bans = 0;
            // at `step`, columns 0..=step are filled: the rows' prefixes of that length
            for step in 0..=shortest {
                let filled: Vec<Vec<i64>> = rows
                    .iter()
                    .map(|r| r.iter().enumerate().map(|(j, &t)| if j as i64 <= step { t } else { PAD }).collect())
                    .collect();
                assert_eq!(applied(default, &filled, step), vec![], "n = {n}, step {step}");
                assert_eq!(distinct(python_no_repeat_ngram(&filled, step, n as i64)), vec![], "n = {n}, step {step}");
                cuda_bans += applied(cuda, &filled, step).len();
            }
            // what the old default (fairseq's CUDA kernel) did with the same hypotheses
            assert!(cuda_bans > 0, "n = {n}");
        }
    }

    /// The bug report: at n = 1 the kernel's semantics ban the BOS, i.e. EOS, from step 0 on
    /// (every sentence then ran to max_len and failed); fairseq 0.12.2's CPU blocking builds no
    /// blocker at all.
    #[test]
    fn size_one_bans_eos_only_in_the_kernel_s_semantics_which_refuse_it() {
        assert!(NgramRepeatBlock::new(1, NgramMode::FairseqCpu).is_none());
        assert!(NgramRepeatBlock::new(0, NgramMode::FairseqCuda).is_none());
        let cuda = NgramRepeatBlock::new(1, NgramMode::FairseqCuda).unwrap();
        let rows = vec![buffer(&[], 10)];
        assert_eq!(applied(Some(cuda), &rows, 0), vec![(0, EOS)]);
        assert!(matches!(cuda.check_bos(EOS, EOS), Err(GenerateError::InvalidOption(_))));
        // a language model's <s> BOS (--add-bos-token): EOS stays allowed
        assert!(cuda.check_bos(0, EOS).is_ok());
        let rows = vec![{
            let mut r = vec![0];
            r.resize(12, PAD);
            r
        }];
        assert_eq!(applied(Some(cuda), &rows, 0), vec![(0, 0)]);
        for n in 2..=4 {
            assert!(NgramRepeatBlock::new(n, NgramMode::FairseqCuda).unwrap().check_bos(EOS, EOS).is_ok());
        }
    }

    /// Against the transcription of fairseq's Python code, on random buffers of every shape:
    /// hypotheses with `<pad>` inside them (a hypothesis at -inf can hold it), buffers narrower
    /// than n, every step, n = 1..6. Where fairseq bans, so do we, and nothing else.
    #[test]
    fn fairseq_cpu_equals_fairseq_s_python_code_wherever_it_bans() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: i64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % m as u64) as i64
        };
        let mut python_bans = 0;
        for n in 1..=6i64 {
            for max_len in [0usize, 1, 2, 3, 5, 8] {
                let width = max_len + 2;
                for step in 0..=max_len as i64 {
                    for _ in 0..20 {
                        // tokens from a tiny alphabet with pad in it; filled columns 0..=step, and
                        // sometimes the whole row (to reach the tail)
                        let full = next(4) == 0;
                        let rows: Vec<Vec<i64>> = (0..3)
                            .map(|_| {
                                (0..width as i64)
                                    .map(|j| if j == 0 { EOS } else if j <= step || full { [PAD, 4, 5][next(3) as usize] } else { PAD })
                                    .collect()
                            })
                            .collect();
                        let want = distinct(python_no_repeat_ngram(&rows, step, n));
                        python_bans += want.len();
                        let block = NgramRepeatBlock { size: n as usize, mode: NgramMode::FairseqCpu };
                        assert_eq!(applied(Some(block), &rows, step), want, "n {n} step {step} {rows:?}");
                    }
                }
            }
        }
        assert!(python_bans > 0, "the cases never made fairseq's code ban: they prove little");
    }

    /// Against the CUDA kernel's threads, n = 1..4, every step, the repeating hypotheses.
    #[test]
    fn fairseq_cuda_equals_the_kernel() {
        let max_len = 14;
        let rows: Vec<Vec<i64>> = repeating().iter().map(|h| buffer(h, max_len)).collect();
        let mut bans = 0;
        for n in 1..=4 {
            let block = NgramRepeatBlock::new(n, NgramMode::FairseqCuda);
            for step in 0..=8 {
                let want = distinct(cuda_kernel(&rows, step, n as i64));
                bans += want.len();
                assert_eq!(applied(block, &rows, step), want, "n {n} step {step}");
            }
        }
        assert!(bans > 10);
        // the bigram (5, 6) exists in 2 5 6 5, so after 5 the token 6 is banned
        assert_eq!(banned_for_row(&[2, 5, 6, 5], 2), vec![6]);
        assert!(banned_for_row(&[2, 5, 6, 5], 3).is_empty());
        assert_eq!(banned_for_row(&[2, 5, 6, 5, 6], 3), vec![5]);
    }

    #[test]
    fn modes_parse_from_the_command_line_and_from_json() {
        use clap::ValueEnum;
        assert_eq!(NgramMode::from_str("fairseq-cpu", false), Ok(NgramMode::FairseqCpu));
        assert_eq!(NgramMode::from_str("fairseq-cuda", false), Ok(NgramMode::FairseqCuda));
        assert_eq!(serde_json::from_str::<NgramMode>("\"fairseq-cuda\"").unwrap(), NgramMode::FairseqCuda);
    }
}
