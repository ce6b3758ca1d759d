//! The language tokens of fairseq's multilingual tasks, as the task objects add and use them:
//! `MultilingualDatasetManager` (`augment_dictionary`, `src_dataset_tranform_func`,
//! `get_decoder_langtok`) with `TranslationMultiSimpleEpochTask.inference_step`/`build_generator`,
//! and `TranslationFromPretrainedBARTTask` (`__init__`, `build_dataset_for_inference`,
//! `build_generator`, `load_langpair_dataset(append_source_id=True)`).

use std::path::Path;

use super::HubError;
use crate::config::{lang_tok, parse_lang_dict, LangTokStyle, LanguageTask};
use crate::text::dictionary::Dictionary;

/// The languages a model knows and how its task marks them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Languages {
    /// The task that adds and uses the language tokens.
    pub task: LanguageTask,
    /// `load_langs` (multilingual) or `--langs` (mBART fine-tuning); empty for a bilingual model.
    pub langs: Vec<String>,
}

/// The language tokens around one (source, target) pair's sentences, as dictionary ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LanguageTokens {
    /// Put before the source (`--encoder-langtok`).
    pub source_prefix: Option<i64>,
    /// Put after the source's EOS (`[src]` of mBART fine-tuning).
    pub source_suffix: Option<i64>,
    /// The decoder's first forced token (`--decoder-langtok`); scoring puts it before the target.
    pub target_prefix: Option<i64>,
    /// Put after the target's EOS when scoring (`[tgt]` of mBART fine-tuning).
    pub target_suffix: Option<i64>,
    /// `BOS` before source and target when scoring (`--prepend-bos`).
    pub prepend_bos: bool,
    /// The generator's EOS when it is not the dictionary's (`[tgt]` of mBART fine-tuning).
    pub eos: Option<i64>,
    /// Symbols left out of the hypothesis text besides EOS (the decoder language token).
    pub strip: Vec<i64>,
}

impl LanguageTokens {
    /// The source ids as the task's inference dataset holds them (`ids` ends with EOS).
    pub fn source(&self, mut ids: Vec<i64>) -> Vec<i64> {
        if let Some(t) = self.source_prefix {
            ids.insert(0, t);
        }
        ids.extend(self.source_suffix);
        ids
    }

    /// How many tokens [`LanguageTokens::source`] adds.
    pub fn source_added(&self) -> usize {
        usize::from(self.source_prefix.is_some()) + usize::from(self.source_suffix.is_some())
    }

    /// The target ids the decoder predicts (`ids` ends with EOS): the forced language token
    /// first, the task's EOS last.
    pub fn target(&self, mut ids: Vec<i64>) -> Vec<i64> {
        if let Some(t) = self.target_prefix {
            ids.insert(0, t);
        }
        ids.extend(self.target_suffix);
        ids
    }

    /// The EOS generation ends with: the task's (`[tgt]` of mBART fine-tuning), else `dict_eos`.
    pub fn generator_eos(&self, dict_eos: i64) -> i64 {
        self.eos.unwrap_or(dict_eos)
    }

    /// The symbols left out of hypothesis text: the dictionary's EOS, the generator's and the
    /// decoder language token.
    pub fn output_strip(&self, dict_eos: i64) -> Vec<i64> {
        [dict_eos, self.generator_eos(dict_eos)].into_iter().chain(self.strip.iter().copied()).collect()
    }

    /// A binarized sample as the task's dataset holds it (`load_langpair_dataset` with the
    /// task's transforms): the language tokens around both sides, BOS first under
    /// `--prepend-bos`. Both sides end with EOS; a split without targets has `None`.
    pub fn sample(&self, source: Vec<i64>, target: Option<Vec<i64>>, bos: i64) -> (Vec<i64>, Option<Vec<i64>>) {
        let mut source = self.source(source);
        let mut target = target.map(|t| self.target(t));
        if self.prepend_bos {
            source.insert(0, bos);
            if let Some(t) = &mut target {
                t.insert(0, bos);
            }
        }
        (source, target)
    }

    /// A (source, target) pair as the task's training dataset holds it (both end with EOS).
    pub fn pair(&self, source: Vec<i64>, target: Vec<i64>, bos: i64) -> (Vec<i64>, Vec<i64>) {
        let (source, target) = self.sample(source, Some(target), bos);
        (source, target.unwrap_or_default())
    }
}

/// More language tokens than any released model has (NLLB-200: 202 languages).
const MAX_LANGUAGE_TOKENS: usize = 100_000;

fn unknown_language(lang: &str, langs: &[String]) -> HubError {
    HubError::UnknownLanguage { lang: lang.to_string(), langs: langs.to_vec() }
}

impl Languages {
    /// The language list of `task`: `--langs`, the `--lang-dict` file (`lang_dict`: where it was
    /// found), else the sorted languages of `--lang-pairs`.
    pub fn new(task: &LanguageTask, lang_dict: Option<&Path>) -> Result<Self, HubError> {
        let langs = match task {
            LanguageTask::Bilingual => Vec::new(),
            LanguageTask::FromPretrainedBart { langs, .. } => langs.clone(),
            LanguageTask::Multilingual(m) => match (&m.lang_dict, &m.langs) {
                (Some(_), Some(_)) => return Err(HubError::LangsAndLangDict),
                (Some(stored), None) => {
                    let path = lang_dict.ok_or_else(|| {
                        let name = Path::new(stored).file_name().map_or(stored.clone(), |n| n.to_string_lossy().into_owned());
                        HubError::NoLangDict { name, stored: stored.clone() }
                    })?;
                    let text = std::fs::read_to_string(path).map_err(|source| HubError::LangDictUnreadable { path: path.to_path_buf(), source })?;
                    parse_lang_dict(&text)
                }
                _ => m.langs_from_pairs(),
            },
        };
        let specs = match task {
            LanguageTask::Multilingual(m) => m.langtoks_specs.len().max(1),
            _ => 1,
        };
        // a checkpoint is untrusted: its lists must not blow the dictionary up
        if langs.len().saturating_mul(specs) > MAX_LANGUAGE_TOKENS {
            return Err(HubError::TooManyLanguageTokens { langs: langs.len(), specs, max: MAX_LANGUAGE_TOKENS });
        }
        Ok(Languages { task: task.clone(), langs })
    }

    /// Whether the task uses languages (a multilingual task or mBART fine-tuning).
    pub fn is_multilingual(&self) -> bool {
        !matches!(self.task, LanguageTask::Bilingual)
    }

    /// `--lang-pairs` of a multilingual model, `src-tgt` each.
    pub fn pairs(&self) -> Vec<String> {
        match &self.task {
            LanguageTask::Multilingual(m) => m.lang_pairs.iter().map(|(s, t)| format!("{s}-{t}")).collect(),
            _ => Vec::new(),
        }
    }

    /// Every language token the task adds, in the order it adds them.
    pub fn token_names(&self) -> Vec<String> {
        match &self.task {
            LanguageTask::Bilingual => Vec::new(),
            LanguageTask::FromPretrainedBart { langs, .. } => {
                langs.iter().map(|l| format!("[{l}]")).chain(["<mask>".to_string()]).collect()
            }
            LanguageTask::Multilingual(m) => {
                let mut names: Vec<String> =
                    m.langtoks_specs.iter().flat_map(|spec| self.langs.iter().map(move |l| lang_tok(l, m.lang_tok_style, spec))).collect();
                if m.add_mask {
                    names.push("<mask>".into());
                }
                names
            }
        }
    }

    /// `augment_dictionary` / `TranslationFromPretrainedBARTTask.__init__`: the language tokens
    /// (then `<mask>`) appended to a dictionary loaded from its file.
    pub fn augment(&self, dict: &mut Dictionary) {
        for name in self.token_names() {
            dict.add_symbol(&name);
        }
    }

    /// `check_langs` / the task's lookups: `lang` must be one of the model's languages.
    pub fn check(&self, lang: &str) -> Result<(), HubError> {
        if self.is_multilingual() && !self.langs.iter().any(|l| l == lang) {
            return Err(unknown_language(lang, &self.langs));
        }
        Ok(())
    }

    /// The language tokens of the pair `src`→`tgt` in the (augmented) dictionaries.
    pub fn tokens(&self, src: &str, tgt: &str, src_dict: &Dictionary, tgt_dict: &Dictionary) -> Result<LanguageTokens, HubError> {
        self.check(src)?;
        self.check(tgt)?;
        let index = |dict: &Dictionary, name: String| -> Result<i64, HubError> {
            match dict.index(&name) {
                i if i == dict.unk() => Err(HubError::NoLanguageToken { token: name }),
                i => Ok(i),
            }
        };
        match &self.task {
            LanguageTask::Bilingual => Ok(LanguageTokens::default()),
            LanguageTask::FromPretrainedBart { prepend_bos, .. } => {
                let (source, target) = (index(src_dict, format!("[{src}]"))?, index(tgt_dict, format!("[{tgt}]"))?);
                Ok(LanguageTokens {
                    source_suffix: Some(source),
                    target_suffix: Some(target),
                    prepend_bos: *prepend_bos,
                    eos: Some(target),
                    ..LanguageTokens::default()
                })
            }
            LanguageTask::Multilingual(m) => {
                let style: LangTokStyle = m.lang_tok_style;
                let source_prefix = match m.encoder_langtok.as_deref() {
                    None => None,
                    Some(spec) => {
                        let lang = if spec.starts_with("src") { src } else { tgt };
                        Some(index(src_dict, lang_tok(lang, style, spec))?)
                    }
                };
                let target_prefix = m.decoder_langtok.as_deref().map(|spec| index(tgt_dict, lang_tok(tgt, style, spec))).transpose()?;
                Ok(LanguageTokens {
                    source_prefix,
                    target_prefix,
                    strip: target_prefix.into_iter().collect(),
                    ..LanguageTokens::default()
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MultilingualTask;

    fn multilingual(style: LangTokStyle, langs: Option<Vec<&str>>) -> LanguageTask {
        LanguageTask::Multilingual(MultilingualTask {
            lang_pairs: vec![("en".into(), "de".into()), ("fr".into(), "en".into())],
            langs: langs.map(|l| l.into_iter().map(String::from).collect()),
            lang_dict: None,
            lang_tok_style: style,
            encoder_langtok: Some("src".into()),
            decoder_langtok: Some("tgt".into()),
            langtoks_specs: vec!["main".into()],
            add_mask: style == LangTokStyle::Mbart,
            fixed_dictionary: None,
            source_dict: None,
            target_dict: None,
        })
    }

    #[test]
    fn multilingual_tokens_are_appended_in_language_order_and_wrap_the_pair() {
        let langs = Languages::new(&multilingual(LangTokStyle::Multilingual, None), None).unwrap();
        assert_eq!(langs.langs, vec!["de", "en", "fr"]);
        let mut d = Dictionary::new();
        d.add_symbol("hallo");
        langs.augment(&mut d);
        assert_eq!((d.index("__de__"), d.index("__en__"), d.index("__fr__"), d.len()), (5, 6, 7, 8));
        let t = langs.tokens("en", "de", &d, &d).unwrap();
        assert_eq!(t.source(vec![4, 2]), vec![6, 4, 2]);
        assert_eq!(t.pair(vec![4, 2], vec![4, 2], 0), (vec![6, 4, 2], vec![5, 4, 2]));
        assert_eq!((t.target_prefix, t.eos, t.strip.clone()), (Some(5), None, vec![5]));
        let e = langs.tokens("en", "cs", &d, &d).unwrap_err().to_string();
        assert_eq!(e, "language `cs` is not one of the model's languages (de, en, fr)");
    }

    #[test]
    fn mbart_style_adds_mask_and_fine_tuning_ends_with_language_tokens() {
        let langs = Languages::new(&multilingual(LangTokStyle::Mbart, Some(vec!["en_XX", "de_DE"])), None).unwrap();
        assert_eq!(langs.token_names(), vec!["[en_XX]", "[de_DE]", "<mask>"]);
        let task = LanguageTask::FromPretrainedBart { langs: vec!["en_XX".into(), "de_DE".into()], prepend_bos: false };
        let langs = Languages::new(&task, None).unwrap();
        let mut d = Dictionary::new();
        langs.augment(&mut d);
        let t = langs.tokens("en_XX", "de_DE", &d, &d).unwrap();
        assert_eq!(t.source(vec![2]), vec![2, 4]);
        assert_eq!(t.pair(vec![2], vec![2], 0), (vec![2, 4], vec![2, 5]));
        assert_eq!(t.eos, Some(5));
    }
}
