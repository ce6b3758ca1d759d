//! `tchseq serve`'s flags.

use std::path::PathBuf;

use clap::Args;

use tchseq::config::ComputeType;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A model directory or checkpoint to serve, as DIR or NAME=DIR; repeat for several models.
    /// A multilingual model serves one language pair per entry: NAME=DIR@SRC-TGT
    /// (the first is the default). The name defaults to the directory's name.
    #[arg(short = 'm', long = "model", value_name = "[NAME=]DIR", required = true)]
    pub models: Vec<String>,
    /// The compute type of every served model, as translate's (a request's `compute_type` must
    /// be this one).
    #[arg(long = "compute-type", value_parser = super::compute_type::parser(), default_value_t = ComputeType::Exact)]
    pub compute_type: ComputeType,
    /// Address to listen on (127.0.0.1 unless told otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port, printed on stderr).
    #[arg(long, default_value_t = 5000)]
    pub port: u16,
    /// Source tokens per gathered buffer and per batch (fairseq's --max-tokens).
    #[arg(long = "max-tokens", default_value_t = 4096)]
    pub max_tokens: usize,
    /// How long a request may wait for others to share its batch, in milliseconds.
    #[arg(long = "max-wait-ms", default_value_t = 5)]
    pub max_wait_ms: u64,
    /// Translate each request on its own (no batching across requests).
    #[arg(long)]
    pub deterministic: bool,
    /// Sentences that may wait per model; beyond it requests get 503 with Retry-After.
    #[arg(long = "queue-size", default_value_t = 2048)]
    pub queue_size: usize,
    /// Sentences per request at most.
    #[arg(long = "max-sentences", default_value_t = 256)]
    pub max_sentences: usize,
    /// Source tokens per sentence at most, EOS included (default: the model's limit).
    #[arg(long = "max-sentence-tokens")]
    pub max_sentence_tokens: Option<usize>,
    /// Request body size at most, in bytes.
    #[arg(long = "max-body-bytes", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Seconds a request may take before it gets 408.
    #[arg(long = "request-timeout", default_value_t = 60.0)]
    pub request_timeout: f64,
    /// Require this key on every route but /health (Authorization: Bearer KEY, X-API-Key,
    /// ?api_key=, or LibreTranslate's api_key field).
    #[arg(long = "api-key", value_name = "KEY", conflicts_with = "api_key_file")]
    pub api_key: Option<String>,
    /// Read the API key from the first line of FILE.
    #[arg(long = "api-key-file", value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
}
