//! `tchseq serve`: flags → `serve::Settings`, models through the hub, then `serve::run`.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::args::{GlobalArgs, ModelArgs, ServeArgs};
use super::common;
use super::Outcome;
use crate::serve::{self, BatchPolicy, Limits, Model, ModelToServe, Settings};
use tchseq::hub::{language_model_checkpoint, LanguageModel, LoadOptions, ModelBundle, ModelSpec, TextMode, Translator, Weights};

pub fn run(global: &GlobalArgs, a: &ServeArgs) -> Result<Outcome> {
    let host: IpAddr = a.host.parse().with_context(|| format!("--host {:?} is not an IP address", a.host))?;
    if a.max_tokens == 0 || a.queue_size == 0 || a.max_sentences == 0 || a.max_body_bytes == 0 {
        bail!("--max-tokens, --queue-size, --max-sentences and --max-body-bytes must be at least 1");
    }
    if !(a.request_timeout > 0.0 && a.request_timeout.is_finite()) {
        bail!("--request-timeout must be a positive number of seconds");
    }
    let api_key = match (&a.api_key, &a.api_key_file) {
        (Some(k), _) => Some(k.clone()),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("--api-key-file {}", path.display()))?;
            Some(text.lines().next().unwrap_or("").trim().to_string())
        }
        (None, None) => None,
    };
    if api_key.as_deref() == Some("") {
        bail!("the API key is empty");
    }
    let device = common::resolve_device(global.device)?;
    let mut models = Vec::new();
    let mut max_positions = usize::MAX;
    for spec in &a.models {
        // DIR@SRC-TGT: one language pair of a multilingual model
        let (spec, pair) = match spec.rsplit_once('@') {
            Some((s, p)) if p.contains('-') => (s.to_string(), p.split_once('-').map(|(s, t)| (s.to_string(), t.to_string()))),
            _ => (spec.clone(), None),
        };
        let spec = &spec;
        let (name, dir) = match spec.split_once('=') {
            Some((name, dir)) if !name.is_empty() => (name.to_string(), PathBuf::from(dir)),
            _ => {
                let dir = PathBuf::from(spec);
                let name = dir.file_name().map_or_else(|| spec.clone(), |n| n.to_string_lossy().into_owned());
                (name, dir)
            }
        };
        if models.iter().any(|m: &ModelToServe| m.name == name) {
            bail!("two models are named {name:?}; name them with --model NAME=DIR (or NAME=DIR@SRC-TGT for a pair of a multilingual model)");
        }
        let (source_lang, target_lang) = pair.clone().unzip();
        let model_args = ModelArgs { model: Some(dir), path: None, data: None, source_lang, target_lang, task: Default::default() };
        let weights = Weights::Load { device, kind: tch::Kind::Float, replay_init: false };
        let hint = format!("name the pair as --model {name}={}@SRC-TGT", model_args.model.as_deref().unwrap_or(Path::new("")).display());
        // without @SRC-TGT a multilingual model serves every pair it knows, on one copy of its weights
        let spec = ModelSpec { any_pair: pair.is_none(), ..common::model_spec(&model_args) };
        if pair.is_none() && language_model_checkpoint(&spec).is_some() {
            let options = LoadOptions { weights, pipeline: Default::default(), compute_type: a.compute_type };
            let lm = LanguageModel::load(&spec, &options).map_err(common::hub_error)?;
            for w in &lm.warnings {
                eprintln!("warning: {w}");
            }
            max_positions = max_positions.min(lm.max_positions());
            models.push(ModelToServe { name, model: Model::Language(Box::new(lm)), pairs: Vec::new() });
            continue;
        }
        let options = LoadOptions { weights, pipeline: Default::default(), compute_type: a.compute_type };
        let bundle = ModelBundle::load(&spec, &options).map_err(|e| common::hub_error_naming(e, &hint))?;
        let translator = Translator::new(bundle, device, TextMode::Raw).map_err(common::hub_error)?;
        common::print_warnings(&translator.report);
        max_positions = max_positions.min(translator.max_source_positions);
        let more = match pair {
            Some(_) => Vec::new(),
            None => translator.language_pairs().into_iter().filter(|p| translator.pair_tokens(&p.0, &p.1).is_ok()).collect(),
        };
        models.push(ModelToServe::translation(name, translator, more));
    }
    let settings = Settings {
        addr: SocketAddr::new(host, a.port),
        policy: BatchPolicy {
            max_tokens: a.max_tokens,
            max_wait: Duration::from_millis(a.max_wait_ms),
            deterministic: a.deterministic,
            queue_size: a.queue_size,
            max_sentence_tokens: a.max_sentence_tokens.unwrap_or(max_positions).min(max_positions),
            inter_threads: global.inter_threads,
            intra_threads: tch::get_num_threads(),
        },
        limits: Limits {
            max_body_bytes: a.max_body_bytes,
            max_sentences: a.max_sentences,
            request_timeout: Duration::from_secs_f64(a.request_timeout),
        },
        api_key,
    };
    serve::run(models, settings, |addr| eprintln!("tchseq serve: listening on http://{addr}"))
        .with_context(|| format!("serving on {}:{}", a.host, a.port))?;
    Ok(Outcome::Ok)
}
