//! A language model's work in a worker: prompts continued (`/v1/translate` on a `transformer_lm`,
//! as `tchseq translate` continues lines, streamed token by token at beam 1) and texts scored (`/v1/score` with `texts`, as
//! `tchseq score --lm --sample-break-mode eos`).


use super::engine::{Hypothesis, Job, Model, SentenceResult, TextResult, TokenSender, Work, Worker};
use tchseq::hub::{LanguageModel, Translation};

impl Worker {
    /// Continues the prompts of the gathered `group` (`n` of them) and replies to each job.
    pub(super) fn continue_prompts(&self, group: Vec<Job>, n: usize) {
        let Model::Language(lm) = &self.model else { return self.refuse(group, n, "a translation model") };
        let mut jobs = Vec::new();
        let mut prompts = Vec::new();
        // per prompt: its job's token stream (if it streams) and its index in the job
        let mut streams: Vec<(Option<TokenSender>, usize)> = Vec::new();
        for job in group {
            let Work::Translate { sentences, options, reply, tokens, .. } = job.work else { continue };
            prompts.extend(sentences.iter().map(|s| lm.encode_prompt(s.trim())));
            streams.extend((0..sentences.len()).map(|i| (tokens.clone(), i)));
            jobs.push((sentences.len(), options, reply));
        }
        // the jobs share one search (`joins`): the first one's options make the generator
        let outcome = jobs.first().ok_or_else(String::new).and_then(|(_, options, _)| {
            let generator = lm.generator(options.generator_config()).map_err(|e| e.to_string())?;
            if options.sampling {
                tch::manual_seed(i64::try_from(options.seed).map_err(|_| format!("seed {} is too large", options.seed))?);
            }
            if options.beam == 1 && streams.iter().any(|(tx, _)| tx.is_some()) {
                let tell = |prompt: usize, token: i64| {
                    if let (Some(tx), index) = &streams[prompt] {
                        let _ = tx.send((*index, lm.dict.symbol(token).to_string()));
                    }
                };
                return lm.complete_streamed(&generator, &prompts, &self.batching(), &tell).map_err(|e| e.to_string());
            }
            lm.complete(&generator, &prompts, &self.batching()).map_err(|e| e.to_string())
        });
        self.release(n);
        let mut done = match outcome {
            Ok(done) => done.into_iter().map(Ok).collect::<Vec<_>>().into_iter(),
            Err(e) => vec![Err(e); n].into_iter(),
        };
        let (mut sentences, mut tokens) = (0, 0);
        for (count, options, reply) in jobs {
            let out: Vec<SentenceResult> = done
                .by_ref()
                .take(count)
                .map(|t| {
                    let t = t?;
                    if let Some(e) = t.error() {
                        return Err(e);
                    }
                    let Translation::Done { hypos, .. } = t else { return Err("not continued".into()) };
                    hypos
                        .iter()
                        .take(options.nbest)
                        .map(|h| {
                            let text = lm.hypothesis_text(h).map_err(|e| e.to_string())?;
                            Ok(Hypothesis {
                                tokens: text.tokens.split(' ').filter(|s| !s.is_empty()).map(str::to_string).collect(),
                                text: text.text,
                                score: h.score,
                                token_scores: options.token_scores.then(|| h.positional_scores.clone()),
                                alignment: None,
                                attention: None,
                            })
                        })
                        .collect()
                })
                .collect();
            sentences += out.iter().filter(|r| r.is_ok()).count();
            tokens += out.iter().flatten().filter_map(|h| h.first()).map(|h| h.tokens.len() + 1).sum::<usize>();
            let _ = reply.send(out);
        }
        // the streams end after the replies went out
        drop(streams);
        self.metrics.add_work(&self.name, sentences, tokens);
    }

    /// Scores the texts of the gathered `group` (`n` of them), each as one sample, and replies
    /// to each job.
    pub(super) fn score_texts(&self, group: Vec<Job>, n: usize) {
        let Model::Language(lm) = &self.model else { return self.refuse(group, n, "a translation model") };
        let mut jobs = Vec::new();
        let mut texts = Vec::new();
        for job in group {
            let Work::ScoreTexts { texts: t, reply } = job.work else { continue };
            jobs.push((t.len(), reply));
            texts.extend(t);
        }
        let refs: Vec<&str> = texts.iter().map(|t| t.trim()).collect();
        let scored: Vec<TextResult> = match lm.score_texts(&refs, LanguageModel::SCORE_BATCH_SIZE) {
            Ok(all) => all
                .into_iter()
                .map(|r| r.map(|s| (s.tokens.iter().map(|&id| lm.dict.symbol(id).to_string()).collect(), s)).map_err(|e| e.to_string()))
                .collect(),
            Err(e) => vec![Err(e.to_string()); texts.len()],
        };
        self.release(n);
        let tokens = scored.iter().flatten().map(|(t, _)| t.len()).sum::<usize>();
        let done = scored.iter().filter(|r| r.is_ok()).count();
        let mut scored = scored.into_iter();
        for (count, reply) in jobs {
            let _ = reply.send(scored.by_ref().take(count).collect());
        }
        self.metrics.add_work(&self.name, done, tokens);
    }
}
