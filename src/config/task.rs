//! The language-token settings of fairseq's multilingual tasks, read from the checkpoint's task
//! config: `translation_multi_simple_epoch` (`fairseq/data/multilingual/
//! multilingual_data_manager.py`: `--lang-pairs`, `--langs`/`--lang-dict`, `--lang-tok-style`,
//! `--encoder-langtok`, `--decoder-langtok`, `--fixed-dictionary`) and
//! `translation_from_pretrained_bart` (`--langs`, `--prepend-bos`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{as_bool, as_opt_str, show, ConfigError};

/// `LangTokStyle`: how a language code becomes a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LangTokStyle {
    /// `__en__`
    Multilingual,
    /// `[en_XX]`
    Mbart,
}

impl LangTokStyle {
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        match s {
            "multilingual" => Ok(Self::Multilingual),
            "mbart" => Ok(Self::Mbart),
            other => Err(ConfigError::Invalid { key: "lang_tok_style".into(), value: other.into(), expected: "language-token style (multilingual or mbart)" }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Multilingual => "multilingual",
            Self::Mbart => "mbart",
        }
    }
}

/// `get_lang_tok(lang, lang_tok_style, spec)`.
pub fn lang_tok(lang: &str, style: LangTokStyle, spec: &str) -> String {
    let lang = if spec.ends_with("dae") {
        format!("{lang}_dae")
    } else if spec.ends_with("mined") {
        format!("{lang}_mined")
    } else {
        lang.to_string()
    };
    match style {
        LangTokStyle::Multilingual => format!("__{lang}__"),
        LangTokStyle::Mbart => format!("[{lang}]"),
    }
}

/// `translation_multi_simple_epoch`'s options, as stored at training time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultilingualTask {
    /// `--lang-pairs`, in training order.
    pub lang_pairs: Vec<(String, String)>,
    /// `--langs`: the language list, whose order sets the token ids.
    pub langs: Option<Vec<String>>,
    /// `--lang-dict`: a file with that list, one language per line (as stored: a training path).
    pub lang_dict: Option<String>,
    pub lang_tok_style: LangTokStyle,
    /// `langtoks["main"]`: the encoder's language-token spec (`src`, `tgt`, ...) or none.
    pub encoder_langtok: Option<String>,
    /// `langtoks["main"]`: the decoder's spec (`tgt` with `--decoder-langtok`) or none.
    pub decoder_langtok: Option<String>,
    /// `--langtoks-specs`: one set of language tokens per spec.
    pub langtoks_specs: Vec<String>,
    /// `<mask>` follows the language tokens (mbart style, or `mono_dae` extra data).
    pub add_mask: bool,
    /// `--fixed-dictionary`: one dictionary for every language (as stored).
    pub fixed_dictionary: Option<String>,
    /// `--source-dict`/`--target-dict` (as stored).
    pub source_dict: Option<String>,
    pub target_dict: Option<String>,
}

/// What a task does with languages beyond the bilingual `translation` task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "snake_case")]
pub enum LanguageTask {
    /// One source and one target language, no language tokens.
    #[default]
    Bilingual,
    /// `translation_multi_simple_epoch`.
    Multilingual(MultilingualTask),
    /// `translation_from_pretrained_bart`: `[lang]` tokens for `langs` and `<mask>` added to
    /// both dictionaries; the source ends with `[src]`, and generation ends with `[tgt]`.
    FromPretrainedBart { langs: Vec<String>, prepend_bos: bool },
}

/// fairseq's task flags given at inference time, over what the checkpoint stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskOverrides {
    pub task: Option<String>,
    pub lang_pairs: Option<String>,
    pub langs: Option<String>,
    pub lang_dict: Option<String>,
    pub lang_tok_style: Option<String>,
    pub encoder_langtok: Option<String>,
    pub decoder_langtok: bool,
    pub fixed_dictionary: Option<String>,
}

impl TaskOverrides {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

pub const MULTILINGUAL_TASK: &str = "translation_multi_simple_epoch";
pub const PRETRAINED_BART_TASK: &str = "translation_from_pretrained_bart";

/// A comma-separated string (`csv_str_list`) or a list of strings.
fn str_list(key: &str, v: &Value) -> Result<Vec<String>, ConfigError> {
    let bad = || ConfigError::Invalid { key: key.into(), value: show(v), expected: "comma-separated list" };
    let items: Vec<String> = match v {
        Value::String(s) => s.split(',').map(|x| x.trim().to_string()).collect(),
        Value::Array(a) => a.iter().map(|x| x.as_str().map(|s| s.trim().to_string()).ok_or_else(bad)).collect::<Result<_, _>>()?,
        _ => return Err(bad()),
    };
    Ok(items.into_iter().filter(|x| !x.is_empty()).collect())
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null() && v.as_str() != Some("None"))
}

impl LanguageTask {
    /// Reads the task's options through `get` (the task config, then the flat namespace).
    pub fn from_namespace<'a>(task: Option<&str>, get: impl Fn(&str) -> Option<&'a Value>) -> Result<Self, ConfigError> {
        match task {
            Some(MULTILINGUAL_TASK) => Ok(Self::Multilingual(MultilingualTask::from_namespace(get)?)),
            Some(PRETRAINED_BART_TASK) => {
                let langs = present(get("langs")).ok_or_else(|| ConfigError::Missing("langs".into()))?;
                let prepend_bos = present(get("prepend_bos")).map(|v| as_bool("prepend_bos", v)).transpose()?.unwrap_or(false);
                Ok(Self::FromPretrainedBart { langs: str_list("langs", langs)?, prepend_bos })
            }
            _ => Ok(Self::Bilingual),
        }
    }
}

impl LanguageTask {
    /// The task as its flags would state it (the inverse of [`LanguageTask::from_namespace`]).
    fn namespace(&self) -> serde_json::Map<String, Value> {
        let mut ns = serde_json::Map::new();
        match self {
            Self::Bilingual => {}
            Self::FromPretrainedBart { langs, prepend_bos } => {
                ns.insert("langs".into(), langs.join(",").into());
                ns.insert("prepend_bos".into(), (*prepend_bos).into());
            }
            Self::Multilingual(m) => {
                let pairs: Vec<String> = m.lang_pairs.iter().map(|(s, t)| format!("{s}-{t}")).collect();
                ns.insert("lang_pairs".into(), pairs.join(",").into());
                if let Some(l) = &m.langs {
                    ns.insert("langs".into(), l.join(",").into());
                }
                let strings = [("lang_dict", &m.lang_dict), ("encoder_langtok", &m.encoder_langtok), ("fixed_dictionary", &m.fixed_dictionary), ("source_dict", &m.source_dict), ("target_dict", &m.target_dict)];
                for (k, v) in strings {
                    if let Some(v) = v {
                        ns.insert(k.into(), v.clone().into());
                    }
                }
                ns.insert("lang_tok_style".into(), m.lang_tok_style.name().into());
                ns.insert("decoder_langtok".into(), m.decoder_langtok.is_some().into());
                ns.insert("langtoks_specs".into(), m.langtoks_specs.join(",").into());
                if m.add_mask && m.lang_tok_style == LangTokStyle::Multilingual {
                    ns.insert("extra_data".into(), serde_json::json!({"mono_dae": ""}));
                }
            }
        }
        ns
    }

    /// The task after fairseq's flags `o` (the task named `task` in the checkpoint).
    pub fn with_overrides(&self, task: Option<&str>, o: &TaskOverrides) -> Result<Self, ConfigError> {
        if o.is_empty() {
            return Ok(self.clone());
        }
        let mut ns = self.namespace();
        let flags = [("lang_pairs", &o.lang_pairs), ("langs", &o.langs), ("lang_dict", &o.lang_dict), ("lang_tok_style", &o.lang_tok_style), ("encoder_langtok", &o.encoder_langtok), ("fixed_dictionary", &o.fixed_dictionary)];
        for (k, v) in flags {
            if let Some(v) = v {
                ns.insert(k.into(), v.clone().into());
            }
        }
        if o.lang_dict.is_some() {
            ns.remove("langs");
        }
        if o.decoder_langtok {
            ns.insert("decoder_langtok".into(), true.into());
        }
        Self::from_namespace(o.task.as_deref().or(task), |k| ns.get(k))
    }
}

impl MultilingualTask {
    fn from_namespace<'a>(get: impl Fn(&str) -> Option<&'a Value>) -> Result<Self, ConfigError> {
        let pairs = present(get("lang_pairs")).ok_or_else(|| ConfigError::Missing("lang_pairs".into()))?;
        let lang_pairs = parse_lang_pairs(&str_list("lang_pairs", pairs)?.join(","))?;
        let langs = present(get("langs")).map(|v| str_list("langs", v)).transpose()?;
        let lang_dict = as_opt_str("lang_dict", present(get("lang_dict")))?;
        let lang_tok_style = match as_opt_str("lang_tok_style", present(get("lang_tok_style")))? {
            Some(s) => LangTokStyle::parse(&s)?,
            None => LangTokStyle::Multilingual,
        };
        // prepare() stores langtoks["main"] = (encoder_langtok, "tgt" if decoder_langtok)
        let (encoder_langtok, decoder_langtok) = match present(get("langtoks")).and_then(|v| v.get("main")) {
            Some(Value::Array(main)) if main.len() == 2 => (as_opt_str("langtoks", Some(&main[0]))?, as_opt_str("langtoks", Some(&main[1]))?),
            Some(other) => return Err(ConfigError::Invalid { key: "langtoks".into(), value: show(other), expected: "(encoder spec, decoder spec) pair" }),
            None => {
                let decoder = present(get("decoder_langtok")).map(|v| as_bool("decoder_langtok", v)).transpose()?.unwrap_or(false);
                (as_opt_str("encoder_langtok", present(get("encoder_langtok")))?, decoder.then(|| "tgt".to_string()))
            }
        };
        let langtoks_specs = match present(get("langtoks_specs")) {
            Some(v) => str_list("langtoks_specs", v)?,
            None => vec!["main".to_string()],
        };
        let mono_dae = match present(get("extra_data")) {
            Some(Value::Object(m)) => m.contains_key("mono_dae"),
            Some(Value::String(s)) => s.contains("mono_dae"),
            _ => false,
        };
        let replacing = present(get("lang_tok_replacing_bos_eos")).map(|v| as_bool("lang_tok_replacing_bos_eos", v)).transpose()?.unwrap_or(false);
        if replacing {
            return Err(ConfigError::UnsupportedOptions("lang_tok_replacing_bos_eos".into()));
        }
        Ok(MultilingualTask {
            lang_pairs,
            langs,
            lang_dict,
            lang_tok_style,
            encoder_langtok,
            decoder_langtok,
            langtoks_specs,
            add_mask: lang_tok_style == LangTokStyle::Mbart || mono_dae,
            fixed_dictionary: as_opt_str("fixed_dictionary", present(get("fixed_dictionary")))?,
            source_dict: as_opt_str("source_dict", present(get("source_dict")))?,
            target_dict: as_opt_str("target_dict", present(get("target_dict")))?,
        })
    }

    /// `load_langs` without a `--lang-dict` file: `--langs`, else the sorted languages of the pairs.
    pub fn langs_from_pairs(&self) -> Vec<String> {
        if let Some(langs) = &self.langs {
            return langs.clone();
        }
        let mut langs: Vec<String> = self.lang_pairs.iter().flat_map(|(s, t)| [s.clone(), t.clone()]).collect();
        langs.sort();
        langs.dedup();
        langs
    }
}

/// `en-de,de-en` → pairs (fairseq splits each on `-`).
pub fn parse_lang_pairs(s: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let bad = |p: &str| ConfigError::Invalid { key: "lang_pairs".into(), value: p.to_string(), expected: "language pair like en-de" };
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split('-').collect::<Vec<_>>().as_slice() {
            [a, b] if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
            _ => Err(bad(p)),
        })
        .collect()
}

/// `load_langs` from a `--lang-dict` file's text: one language per non-empty line, in order.
pub fn parse_lang_dict(text: &str) -> Vec<String> {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn multilingual_options_as_prepare_reads_them() {
        let ns = json!({"lang_pairs": "en-de,fr-en", "encoder_langtok": "src", "decoder_langtok": true, "lang_tok_style": "mbart", "langs": "en_XX,de_DE"});
        let t = LanguageTask::from_namespace(Some(MULTILINGUAL_TASK), |k| ns.get(k)).unwrap();
        let LanguageTask::Multilingual(m) = t else { panic!("{t:?}") };
        assert_eq!(m.lang_pairs, vec![("en".into(), "de".into()), ("fr".into(), "en".into())]);
        assert_eq!((m.encoder_langtok.as_deref(), m.decoder_langtok.as_deref(), m.add_mask), (Some("src"), Some("tgt"), true));
        assert_eq!(m.langs_from_pairs(), vec!["en_XX", "de_DE"]);
        // a stored langtoks["main"] wins over the flags
        let ns = json!({"lang_pairs": ["de-en", "en-de"], "langtoks": {"main": [null, "tgt"]}, "encoder_langtok": "src"});
        let LanguageTask::Multilingual(m) = LanguageTask::from_namespace(Some(MULTILINGUAL_TASK), |k| ns.get(k)).unwrap() else { panic!() };
        assert_eq!((m.encoder_langtok.as_deref(), m.decoder_langtok.as_deref(), m.add_mask), (None, Some("tgt"), false));
        assert_eq!(m.langs_from_pairs(), vec!["de", "en"]);
        let ns = json!({"lang_pairs": "en_de"});
        assert!(LanguageTask::from_namespace(Some(MULTILINGUAL_TASK), |k| ns.get(k)).unwrap_err().to_string().contains("en_de"));
    }

    #[test]
    fn language_tokens_follow_get_lang_tok() {
        assert_eq!(lang_tok("en", LangTokStyle::Multilingual, "main"), "__en__");
        assert_eq!(lang_tok("en_XX", LangTokStyle::Mbart, "main"), "[en_XX]");
        assert_eq!(lang_tok("en", LangTokStyle::Multilingual, "mono_dae"), "__en_dae__");
        assert_eq!(parse_lang_dict("fr\n\n en \nde\n"), vec!["fr", "en", "de"]);
    }
}
