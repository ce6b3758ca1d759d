//! Lines per second of Moses tokenization + subword-nmt BPE (fairseq's default pipeline).
//! Usage: text_bench LANG CODES < corpus.txt   (see bench/text.sh)

use std::io::BufRead;
use std::time::Instant;

use tchseq::text::pipeline::{PipelineOptions, TextPipeline};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let lang = args.next().ok_or("usage: text_bench LANG CODES < corpus")?;
    let codes = args.next().ok_or("usage: text_bench LANG CODES < corpus")?;
    let lines: Vec<String> = std::io::stdin().lock().lines().collect::<Result<_, _>>()?;
    let pipeline = TextPipeline::new(&PipelineOptions {
        tokenizer: Some("moses".into()),
        bpe: Some("subword_nmt".into()),
        bpe_codes: Some(codes.into()),
        source_lang: lang.clone(),
        target_lang: lang,
        ..Default::default()
    })?;
    let start = Instant::now();
    let mut tokens = 0usize;
    for line in &lines {
        tokens += pipeline.encode(line).split(' ').count();
    }
    let secs = start.elapsed().as_secs_f64();
    println!("rust: {} lines, {tokens} tokens in {secs:.2}s = {:.0} lines/s", lines.len(), lines.len() as f64 / secs);
    Ok(())
}
