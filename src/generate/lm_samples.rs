//! The samples fairseq-eval-lm scores, built as fairseq 0.12.2's `language_modeling` task builds
//! them: `TokenBlockDataset` (`--sample-break-mode`, `--tokens-per-sample`) under a
//! `MonolingualDataset` (`--add-bos-token`), and `LMContextWindowDataset` (`--context-window`).
//! Sentences arrive one at a time (each ending in EOS, as binarized), so a file of any size is
//! scored in bounded memory.

/// `--sample-break-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakMode {
    /// Blocks of exactly `tokens_per_sample` tokens of the running text, across sentences.
    None,
    /// Whole sentences packed greedily into blocks of at most `tokens_per_sample` tokens.
    Complete,
    /// One sentence per block, whatever its length.
    Eos,
}

impl BreakMode {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "none" => Some(BreakMode::None),
            "complete" => Some(BreakMode::Complete),
            "eos" => Some(BreakMode::Eos),
            _ => None,
        }
    }
}

/// One row to score: `tokens` is the model input (with a context window, right-padded as
/// fairseq's collater pads it), `target[i]` the token predicted after `tokens[..=i]`; the
/// scored positions are `start..target.len()` (the earlier ones are context).
#[derive(Debug, Clone, PartialEq)]
pub struct LmRow {
    /// The sample id fairseq prints (the block index; in `eos` mode the line number).
    pub id: usize,
    pub tokens: Vec<i64>,
    pub target: Vec<i64>,
    pub start: usize,
    /// The block's size as fairseq filters it (`--max-positions`): its tokens, BOS not counted.
    pub size: usize,
}

/// Special symbols of the dictionary.
#[derive(Debug, Clone, Copy)]
pub struct LmSpecials {
    pub bos: i64,
    pub eos: i64,
}

/// Sentences in, rows out: blocks (`TokenBlockDataset` with `include_targets`), BOS
/// (`MonolingualDataset._maybe_add_bos`) and the context window.
#[derive(Debug)]
pub struct LmSamples {
    mode: BreakMode,
    /// Tokens per block (already reduced by the context window, as fairseq-eval-lm does).
    block: usize,
    context_window: usize,
    add_bos: bool,
    specials: LmSpecials,
    /// `None`/`Complete`: the text not yet in a block, and the token before it.
    pending: Vec<i64>,
    previous: i64,
    next_id: usize,
    /// The context window's `prev_tokens`.
    context: Vec<i64>,
}

/// fairseq-eval-lm's blocks would be empty: the context window takes the whole sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("tokens_per_sample ({tokens_per_sample}) must be larger than context_window ({context_window})")]
pub struct BlockError {
    /// `--tokens-per-sample`.
    pub tokens_per_sample: usize,
    /// `--context-window`.
    pub context_window: usize,
}

impl LmSamples {
    /// `tokens_per_sample` as given; with a context window fairseq-eval-lm cuts blocks of
    /// `tokens_per_sample - context_window` tokens.
    pub fn new(mode: BreakMode, tokens_per_sample: usize, context_window: usize, add_bos: bool, specials: LmSpecials) -> Result<Self, BlockError> {
        let block = tokens_per_sample
            .checked_sub(context_window)
            .filter(|&b| b > 0)
            .ok_or(BlockError { tokens_per_sample, context_window })?;
        Ok(LmSamples {
            mode,
            block,
            context_window,
            add_bos,
            specials,
            pending: Vec::new(),
            previous: specials.eos,
            next_id: 0,
            context: Vec::new(),
        })
    }

    /// The rows one more sentence (its tokens, ending in EOS) completes.
    pub fn push(&mut self, sentence: &[i64]) -> Vec<LmRow> {
        match self.mode {
            BreakMode::Eos => vec![self.row(sentence.to_vec(), self.specials.eos)],
            BreakMode::None => {
                self.pending.extend_from_slice(sentence);
                let mut rows = Vec::new();
                while self.pending.len() >= self.block {
                    let rest = self.pending.split_off(self.block);
                    let block = std::mem::replace(&mut self.pending, rest);
                    rows.push(self.take_block(block));
                }
                rows
            }
            BreakMode::Complete => {
                let mut rows = Vec::new();
                if !self.pending.is_empty() && self.pending.len() + sentence.len() > self.block {
                    let block = std::mem::take(&mut self.pending);
                    rows.push(self.take_block(block));
                }
                self.pending.extend_from_slice(sentence);
                if self.pending.len() >= self.block {
                    let block = std::mem::take(&mut self.pending);
                    rows.push(self.take_block(block));
                }
                rows
            }
        }
    }

    /// Gives up the next sample id without a sample (`eos` mode: a line that cannot be read).
    pub fn skip(&mut self) -> usize {
        self.next_id += 1;
        self.next_id - 1
    }

    /// The last, shorter block.
    pub fn finish(&mut self) -> Vec<LmRow> {
        match std::mem::take(&mut self.pending) {
            block if block.is_empty() => Vec::new(),
            block => vec![self.take_block(block)],
        }
    }

    fn take_block(&mut self, block: Vec<i64>) -> LmRow {
        let previous = self.previous;
        self.previous = *block.last().unwrap_or(&previous);
        self.row(block, previous)
    }

    /// Source = the block shifted right by one in the running text (`previous` first), target
    /// = the block; then BOS, then the context window.
    fn row(&mut self, block: Vec<i64>, previous: i64) -> LmRow {
        let id = self.next_id;
        self.next_id += 1;
        let size = block.len();
        let mut source = Vec::with_capacity(block.len() + 1);
        source.push(previous);
        source.extend_from_slice(&block[..block.len().saturating_sub(1)]);
        let mut target = block;
        if self.add_bos {
            source.insert(0, self.specials.bos);
            target.insert(0, self.specials.bos);
        }
        if self.context_window == 0 {
            return LmRow { id, tokens: source, target, start: 0, size };
        }
        // LMContextWindowDataset.collater: drop the oldest context beyond
        // tokens_per_sample + context_window, score after it, keep the last context_window
        let max_len = self.block + self.context_window;
        let extra = (self.context.len() + source.len()).saturating_sub(max_len);
        self.context.drain(..extra.min(self.context.len()));
        let start = self.context.len();
        let mut tokens = std::mem::take(&mut self.context);
        tokens.extend_from_slice(&source);
        let keep = tokens.len().saturating_sub(self.context_window);
        self.context = tokens[keep..].to_vec();
        // the collater's row is `prev ++ src ++ pads` as wide as the source plus the window
        tokens.resize(tokens.len() + self.context_window - start, crate::model::PADDING_IDX);
        let mut full_target = vec![crate::model::PADDING_IDX; start];
        full_target.extend(target);
        LmRow { id, tokens, target: full_target, start, size }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: LmSpecials = LmSpecials { bos: 0, eos: 2 };

    fn all(mode: BreakMode, tps: usize, cw: usize, bos: bool, sentences: &[&[i64]]) -> Vec<LmRow> {
        let mut s = LmSamples::new(mode, tps, cw, bos, S).unwrap();
        let mut rows: Vec<LmRow> = sentences.iter().flat_map(|x| s.push(x)).collect();
        rows.extend(s.finish());
        rows
    }

    #[test]
    fn eos_mode_is_one_sentence_per_row_shifted_right() {
        let rows = all(BreakMode::Eos, 4, 0, false, &[&[5, 6, 7, 8, 9, 2], &[10, 2]]);
        assert_eq!(rows[0].tokens, vec![2, 5, 6, 7, 8, 9]);
        assert_eq!(rows[0].target, vec![5, 6, 7, 8, 9, 2]);
        assert_eq!((rows[1].id, rows[1].tokens.clone()), (1, vec![2, 10]));
        let bos = all(BreakMode::Eos, 4, 0, true, &[&[10, 2]]);
        assert_eq!((bos[0].tokens.clone(), bos[0].target.clone()), (vec![0, 2, 10], vec![0, 10, 2]));
        assert_eq!(bos[0].size, 2);
    }

    #[test]
    fn none_mode_cuts_the_running_text() {
        let rows = all(BreakMode::None, 3, 0, false, &[&[5, 6, 2], &[7, 8, 9, 2]]);
        let targets: Vec<Vec<i64>> = rows.iter().map(|r| r.target.clone()).collect();
        assert_eq!(targets, vec![vec![5, 6, 2], vec![7, 8, 9], vec![2]]);
        assert_eq!(rows[1].tokens, vec![2, 7, 8]);
        assert_eq!(rows[2].tokens, vec![9]);
    }

    #[test]
    fn complete_mode_packs_whole_sentences() {
        let rows = all(BreakMode::Complete, 5, 0, false, &[&[5, 6, 2], &[7, 2], &[8, 9, 2], &[1, 1, 1, 1, 1, 1, 2]]);
        let targets: Vec<Vec<i64>> = rows.iter().map(|r| r.target.clone()).collect();
        assert_eq!(targets, vec![vec![5, 6, 2, 7, 2], vec![8, 9, 2], vec![1, 1, 1, 1, 1, 1, 2]]);
    }

    #[test]
    fn the_context_window_prepends_earlier_tokens() {
        // blocks of 4 - 2 = 2 tokens, 2 tokens of context
        let rows = all(BreakMode::None, 4, 2, false, &[&[5, 6, 7, 8, 9, 2]]);
        assert_eq!((rows[0].tokens.clone(), rows[0].start), (vec![2, 5, 1, 1], 0));
        assert_eq!((rows[1].tokens.clone(), rows[1].start), (vec![2, 5, 6, 7], 2));
        assert_eq!(rows[1].target, vec![1, 1, 7, 8]);
        assert_eq!((rows[2].tokens.clone(), rows[2].start), (vec![6, 7, 8, 9], 2));
        assert!(LmSamples::new(BreakMode::None, 4, 4, false, S).is_err());
    }
}
