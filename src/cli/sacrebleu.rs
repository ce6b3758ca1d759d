//! `tchseq sacrebleu REF... -i HYP [-m bleu chrf ter]`: sacreBLEU 2.5.1's corpus BLEU, chrF and
//! TER, printed exactly as the `sacrebleu` CLI prints them (see `tchseq::metrics`), with
//! `--confidence` for one system and `--paired-bs` for several (`-i BASELINE SYS...`).
//!
//! The file depends on nothing in `super` so that tests/it/sacrebleu.rs can compile and test it
//! as it stands.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use tchseq::metrics::results_table::PairedTest;
use tchseq::metrics::{self, MetricKind, SacrebleuOptions, Smooth, TokenizerKind};

/// Arguments of `tchseq sacrebleu`; names follow the sacrebleu CLI (its two-letter short options
/// `-tok`, `-lc`, `-sv`, `-cw`, `-cc`, `-sh` are long aliases here: `--tok`, `--lc`, ...).
#[derive(Debug, Clone, Args)]
pub struct SacrebleuArgs {
    /// Reference files, one per set of references (line i of each is a reference of line i of HYP).
    #[arg(required = true, value_name = "REF")]
    pub refs: Vec<PathBuf>,
    /// The system output, one hypothesis per line; with --paired-bs, the baseline then the other
    /// systems.
    #[arg(short = 'i', long = "input", value_name = "HYP", num_args = 1.., required = true)]
    pub input: Vec<PathBuf>,
    /// Metrics to compute (printed in the order BLEU, chrF, TER, as sacreBLEU does).
    #[arg(short = 'm', long = "metrics", num_args = 1.., default_values_t = ["bleu".to_string()],
          value_parser = ["bleu", "chrf", "ter"])]
    pub metrics: Vec<String>,
    /// Output format: sacreBLEU 2.x's JSON or its one-line text.
    #[arg(short = 'f', long, default_value = "json", value_parser = ["json", "text"])]
    pub format: String,
    /// Digits after the decimal point.
    #[arg(short = 'w', long, default_value_t = 1)]
    pub width: usize,
    /// Print only the scores.
    #[arg(short = 'b', long = "score-only")]
    pub score_only: bool,
    /// Abbreviated signatures (text format only, as in sacreBLEU).
    #[arg(long, alias = "sh")]
    pub short: bool,
    /// The version written in signatures.
    #[arg(long = "sacrebleu-version", default_value = metrics::SACREBLEU_VERSION, value_name = "V")]
    pub sacrebleu_version: String,

    /// BLEU tokenizer: 13a, intl, char, none, zh (ja-mecab, ko-mecab, spm, flores101/200 are not available).
    #[arg(long = "tokenize", alias = "tok", default_value = "13a", value_name = "TOK")]
    pub tokenize: String,
    /// BLEU: lowercase hypotheses and references.
    #[arg(long = "lowercase", alias = "lc")]
    pub lowercase: bool,
    /// BLEU smoothing: exp, floor, add-k, none.
    #[arg(short = 's', long = "smooth-method", default_value = "exp", value_parser = ["exp", "floor", "add-k", "none"])]
    pub smooth_method: String,
    /// BLEU smoothing value for floor (default 0.1) and add-k (default 1).
    #[arg(long = "smooth-value", alias = "sv", value_name = "X")]
    pub smooth_value: Option<f64>,

    /// chrF character n-gram order.
    #[arg(long = "chrf-char-order", alias = "cc", default_value_t = 6)]
    pub chrf_char_order: usize,
    /// chrF word n-gram order (2 = chrF++).
    #[arg(long = "chrf-word-order", alias = "cw", default_value_t = 0)]
    pub chrf_word_order: usize,
    /// chrF beta.
    #[arg(long = "chrf-beta", default_value_t = 2)]
    pub chrf_beta: u32,
    /// chrF: keep whitespace in character n-grams.
    #[arg(long = "chrf-whitespace")]
    pub chrf_whitespace: bool,
    /// chrF: lowercase.
    #[arg(long = "chrf-lowercase")]
    pub chrf_lowercase: bool,
    /// chrF: epsilon smoothing (as chrF++.py, NLTK and Moses).
    #[arg(long = "chrf-eps-smoothing")]
    pub chrf_eps_smoothing: bool,

    /// TER: case-sensitive.
    #[arg(long = "ter-case-sensitive")]
    pub ter_case_sensitive: bool,

    /// Report a 95% confidence interval by bootstrap resampling (one system; seeded by the
    /// SACREBLEU_SEED environment variable, default 12345).
    #[arg(long = "confidence", alias = "ci")]
    pub confidence: bool,
    /// The number of bootstrap resamples of --confidence (none when below 2, as in sacreBLEU).
    #[arg(long = "confidence-n", alias = "cin", default_value_t = 1000, allow_negative_numbers = true, value_name = "N")]
    pub confidence_n: i64,
    /// Paired bootstrap resampling test of each system against the first (the baseline).
    #[arg(long = "paired-bs", alias = "pbs", conflicts_with = "paired_ar")]
    pub paired_bs: bool,
    /// The number of resamples of --paired-bs (1000 when not above 0, as in sacreBLEU).
    #[arg(long = "paired-bs-n", alias = "pbsn", default_value_t = 1000, allow_negative_numbers = true, value_name = "N")]
    pub paired_bs_n: i64,
    /// Paired approximate randomization test of each system against the first (the baseline).
    #[arg(long = "paired-ar", alias = "par")]
    pub paired_ar: bool,
    /// The number of trials of --paired-ar (10000 when not above 0, as in sacreBLEU).
    #[arg(long = "paired-ar-n", alias = "parn", default_value_t = 10000, allow_negative_numbers = true, value_name = "N")]
    pub paired_ar_n: i64,
    /// Workers of the paired tests (accepted; the results do not depend on it).
    #[arg(long = "paired-jobs", short = 'j', default_value_t = 1, value_name = "N")]
    pub paired_jobs: usize,
}

impl SacrebleuArgs {
    /// The library's options for these arguments.
    pub fn options(&self) -> Result<SacrebleuOptions> {
        let mut o = SacrebleuOptions {
            metrics: self.metrics.iter().map(|m| MetricKind::parse(m)).collect::<Result<_, _>>()?,
            json: self.format == "json",
            width: self.width,
            score_only: self.score_only,
            short: self.short,
            version: self.sacrebleu_version.clone(),
            confidence_n: self.confidence.then_some(self.confidence_n),
            seed: match std::env::var("SACREBLEU_SEED") {
                Ok(v) => Some(v),
                Err(std::env::VarError::NotPresent) => None,
                Err(e) => bail!("SACREBLEU_SEED: {e}"),
            },
            ..Default::default()
        };
        o.bleu.tokenize = TokenizerKind::parse(&self.tokenize)?;
        o.bleu.lowercase = self.lowercase;
        o.bleu.smooth_method = Smooth::parse(&self.smooth_method)?;
        o.bleu.smooth_value = self.smooth_value;
        o.chrf.char_order = self.chrf_char_order;
        o.chrf.word_order = self.chrf_word_order;
        o.chrf.beta = self.chrf_beta;
        o.chrf.whitespace = self.chrf_whitespace;
        o.chrf.lowercase = self.chrf_lowercase;
        o.chrf.eps_smoothing = self.chrf_eps_smoothing;
        o.ter.case_sensitive = self.ter_case_sensitive;
        Ok(o)
    }
}

/// Computes the metrics and writes what the sacrebleu CLI prints.
pub fn run_to(a: &SacrebleuArgs, out: &mut dyn Write) -> Result<()> {
    run_with(a, &a.options()?, out)
}

/// [`run_to`] with the library's options given (`a.options()`, possibly changed).
pub fn run_with(a: &SacrebleuArgs, opts: &SacrebleuOptions, out: &mut dyn Write) -> Result<()> {
    let refs: Vec<&Path> = a.refs.iter().map(PathBuf::as_path).collect();
    let report = if a.paired_bs || a.paired_ar {
        let systems = read_systems(&a.input)?;
        if systems.len() == 1 {
            bail!("Paired tests require multiple input systems given to --input (-i).");
        }
        let refs = refs.iter().map(|p| metrics::read_lines(p)).collect::<Result<Vec<_>, _>>()?;
        let (test, n) =
            if a.paired_bs { (PairedTest::Bootstrap, a.paired_bs_n) } else { (PairedTest::ApproximateRandomization, a.paired_ar_n) };
        metrics::sacrebleu_paired_report(&systems, &refs, opts, test, n)?
    } else {
        if a.input.len() > 1 {
            if a.confidence {
                bail!("Use paired tests (--paired) for multiple systems.");
            }
            bail!("scoring several systems without a paired test (--paired-bs) is not available in tchseq");
        }
        let input = &a.input[0];
        metrics::sacrebleu_report_files(input, &refs, opts).with_context(|| format!("scoring {}", input.display()))?
    };
    out.write_all(report.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// The systems of `-i` named by their paths, as sacreBLEU reads them for a paired test: the
/// baseline given again is skipped, another name given twice is an error.
fn read_systems(inputs: &[PathBuf]) -> Result<Vec<(String, Vec<String>)>> {
    let mut systems: Vec<(String, Vec<String>)> = Vec::new();
    for path in inputs {
        let name = path.display().to_string();
        if let Some(k) = systems.iter().position(|(n, _)| *n == name) {
            if k == 0 {
                continue;
            }
            bail!("{name:?} already used to name a system. Make sure to have a different basename for each system.");
        }
        systems.push((name, metrics::read_lines(path)?));
    }
    Ok(systems)
}

/// `tchseq sacrebleu`: the report on stdout.
pub fn run(a: &SacrebleuArgs) -> Result<()> {
    run_to(a, &mut std::io::stdout().lock())
}
