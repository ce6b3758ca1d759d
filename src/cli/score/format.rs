//! One output row: the input fields plus the scores, as CSV or JSONL.

use super::*;
use anyhow::Result;
use csv::ByteRecord;


use crate::cli::args::ScoreFormat;

pub(super) fn header_bytes(input: &Input, opts: &Options) -> Result<Vec<u8>> {
    if opts.shard.is_some() && input.header_names().iter().any(|n| n == ROW_COLUMN) {
        anyhow::bail!("the input has a `{ROW_COLUMN}` column, which --num-shards adds; rename it");
    }
    match opts.format {
        ScoreFormat::Jsonl => Ok(Vec::new()),
        ScoreFormat::Csv => {
            let mut w = csv::WriterBuilder::new().delimiter(opts.delimiter).from_writer(Vec::new());
            let mut header = input.header.clone();
            for col in output_columns(opts.per_token) {
                header.push_field(col.as_bytes());
            }
            if opts.shard.is_some() {
                header.push_field(ROW_COLUMN.as_bytes());
            }
            w.write_byte_record(&header)?;
            Ok(w.into_inner().map_err(|e| anyhow::anyhow!("{}", e.error()))?)
        }
    }
}

/// Shortest text that reads back as the same f32.
pub(super) fn f32_text(x: f32) -> String {
    format!("{x}")
}

/// f32 values in JSON as their shortest f32 text (not the widened f64 digits).
pub(super) fn f32_json(x: f32) -> serde_json::Value {
    f32_text(x)
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(serde_json::Value::Null, serde_json::Value::Number)
}

pub(super) fn format_row(
    out: &mut Vec<u8>,
    input: &Input,
    opts: &Options,
    rec: &ByteRecord,
    result: &RowResult,
    backend: &dyn Backend,
    row: Option<u64>,
) -> Result<()> {
    let per_token = |s: &Scored, tokens: &[i64]| -> serde_json::Value {
        serde_json::Value::Array(
            tokens
                .iter()
                .zip(&s.positional_scores)
                .map(|(&t, &p)| serde_json::json!([backend.target_symbol(t), f32_json(p)]))
                .collect(),
        )
    };
    match opts.format {
        ScoreFormat::Csv => {
            let columns = input.header.len();
            let mut fields: Vec<Vec<u8>> = (0..columns).map(|i| rec.get(i).unwrap_or(b"").to_vec()).collect();
            match result {
                Ok(ScoredRow { scored: s, target }) => {
                    let ppl = (-f64::from(s.avg_logprob)).exp();
                    fields.push(f32_text(s.logprob).into_bytes());
                    fields.push(target.len().to_string().into_bytes());
                    fields.push(f32_text(s.avg_logprob).into_bytes());
                    fields.push(format!("{ppl}").into_bytes());
                    fields.push(Vec::new());
                    if opts.per_token {
                        fields.push(per_token(s, target).to_string().into_bytes());
                    }
                }
                Err(reason) => {
                    fields.extend([Vec::new(), Vec::new(), Vec::new(), Vec::new()]);
                    fields.push(reason.replace(['\n', '\r'], " ").into_bytes());
                    if opts.per_token {
                        fields.push(Vec::new());
                    }
                }
            }
            if let Some(row) = row {
                fields.push(row.to_string().into_bytes());
            }
            let mut w = csv::WriterBuilder::new().delimiter(opts.delimiter).from_writer(Vec::new());
            w.write_record(&fields)?;
            out.extend(w.into_inner().map_err(|e| anyhow::anyhow!("{}", e.error()))?);
        }
        ScoreFormat::Jsonl => {
            let mut obj = serde_json::Map::new();
            for (i, name) in input.header_names().iter().enumerate() {
                let value = rec
                    .get(i)
                    .map_or(serde_json::Value::Null, |b| String::from_utf8_lossy(b).into_owned().into());
                obj.insert(name.clone(), value);
            }
            match result {
                Ok(ScoredRow { scored: s, target }) => {
                    obj.insert("logprob".into(), f32_json(s.logprob));
                    obj.insert("tokens".into(), (target.len() as u64).into());
                    obj.insert("avg_logprob".into(), f32_json(s.avg_logprob));
                    let ppl = (-f64::from(s.avg_logprob)).exp();
                    obj.insert(
                        "ppl".into(),
                        serde_json::Number::from_f64(ppl).map_or(serde_json::Value::Null, serde_json::Value::Number),
                    );
                    obj.insert("error".into(), serde_json::Value::Null);
                    if opts.per_token {
                        obj.insert(PER_TOKEN_COLUMN.into(), per_token(s, target));
                    }
                }
                Err(reason) => {
                    for key in ["logprob", "tokens", "avg_logprob", "ppl"] {
                        obj.insert(key.into(), serde_json::Value::Null);
                    }
                    obj.insert("error".into(), reason.replace(['\n', '\r'], " ").into());
                    if opts.per_token {
                        obj.insert(PER_TOKEN_COLUMN.into(), serde_json::Value::Null);
                    }
                }
            }
            if let Some(row) = row {
                obj.insert(ROW_COLUMN.into(), row.into());
            }
            serde_json::to_writer(&mut *out, &obj)?;
            out.push(b'\n');
        }
    }
    Ok(())
}
