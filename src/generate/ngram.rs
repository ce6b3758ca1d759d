//! `--no-repeat-ngram-size` (fairseq's `NGramRepeatBlock`).

use tch::Tensor;

use super::GenerateError;

/// Which behaviour `--no-repeat-ngram-size n` has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NgramMode {
    /// What the option means (fairseq's CUDA kernel and fairseq <= 0.10.2): a token that would
    /// complete an n-gram already present in the hypothesis (BOS included) is banned.
    Intended,
    /// fairseq 0.12.2 on CPU: its Python fallback compares against the tail of the whole
    /// pad-filled token buffer, which never matches, so nothing is ever banned.
    FairseqCompat,
}

/// `NGramRepeatBlock(n)` with the chosen semantics.
#[derive(Debug, Clone, Copy)]
pub struct NgramRepeatBlock {
    pub size: usize,
    pub mode: NgramMode,
}

impl NgramRepeatBlock {
    /// Bans, in place, every token that would repeat an n-gram. `tokens` is the generator's
    /// `[rows, max_len + 2]` buffer; positions `0..=step` are filled.
    pub fn apply(&self, tokens: &Tensor, lprobs: &mut Tensor, step: i64) -> Result<(), GenerateError> {
        if self.mode == NgramMode::FairseqCompat {
            return Ok(());
        }
        let n = self.size as i64;
        let check_start_pos = step + 2 - n;
        if n == 0 || check_start_pos < 0 {
            return Ok(());
        }
        let prefix = tokens.f_narrow(1, 0, step + 1)?.f_contiguous()?;
        let rows = prefix.size()[0];
        let flat = Vec::<i64>::try_from(prefix.f_view([-1])?)?;
        let width = (step + 1) as usize;
        let mut banned_rows = Vec::new();
        let mut banned_tokens = Vec::new();
        for row in 0..rows as usize {
            let toks = &flat[row * width..(row + 1) * width];
            for (_, t) in banned_for_row(toks, self.size) {
                banned_rows.push(row as i64);
                banned_tokens.push(t);
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

/// The tokens banned after the prefix `toks` (BOS first): for every earlier position `i` whose
/// `n-1` tokens equal the last `n-1` tokens of the prefix, the token at `i + n - 1`.
fn banned_for_row(toks: &[i64], n: usize) -> Vec<(usize, i64)> {
    let len = toks.len();
    if n == 0 || len + 1 < n {
        return Vec::new();
    }
    let check_start_pos = len + 1 - n;
    let suffix = &toks[check_start_pos..];
    (0..check_start_pos)
        .filter(|&i| &toks[i..i + n - 1] == suffix)
        .map(|i| (i, toks[i + n - 1]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn bigram_block_bans_the_continuation_of_a_repeated_token() {
        // BOS=2, then 5 6 5: the bigram (5, 6) exists, so after 5 the token 6 is banned
        let toks = [2, 5, 6, 5];
        assert_eq!(banned_for_row(&toks, 2).into_iter().map(|x| x.1).collect::<Vec<_>>(), vec![6]);
        // trigram: last two (6, 5) never seen before
        assert!(banned_for_row(&toks, 3).is_empty());
        let toks = [2, 5, 6, 5, 6];
        assert_eq!(banned_for_row(&toks, 3).into_iter().map(|x| x.1).collect::<Vec<_>>(), vec![5]);
    }

    #[test]
    fn apply_sets_minus_inf_only_in_intended_mode() {
        let tokens = Tensor::from_slice(&[2i64, 5, 6, 5, 1, 1]).view([1, 6]);
        let fresh = || Tensor::zeros([1, 8], (Kind::Float, Device::Cpu));
        let mut l = fresh();
        NgramRepeatBlock { size: 2, mode: NgramMode::Intended }.apply(&tokens, &mut l, 3).unwrap();
        let v = Vec::<f32>::try_from(l.view([-1])).unwrap();
        assert!(v[6].is_infinite() && v[6] < 0.0);
        assert_eq!(v.iter().filter(|x| x.is_infinite()).count(), 1);
        let mut l = fresh();
        NgramRepeatBlock { size: 2, mode: NgramMode::FairseqCompat }.apply(&tokens, &mut l, 3).unwrap();
        assert!(Vec::<f32>::try_from(l.view([-1])).unwrap().iter().all(|x| *x == 0.0));
    }
}
