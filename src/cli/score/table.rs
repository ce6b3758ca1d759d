//! The input table: CSV/TSV records, their header and fields.

use super::*;
use anyhow::{bail, Context, Result};
use csv::ByteRecord;
use std::fs::File;
use std::path::Path;



/// The opened input with its header checked.
pub struct Input {
    pub(super) reader: csv::Reader<File>,
    pub(super) header: ByteRecord,
    pub(super) header_names: Vec<String>,
    pub(super) source_idx: usize,
    pub(super) target_idx: usize,
}

impl Input {
    pub fn open(opts: &Options) -> Result<Self> {
        let file = File::open(&opts.input)
            .with_context(|| format!("cannot open --input {}", opts.input.display()))?;
        let mut reader = csv_reader(opts.delimiter, file);
        let header = reader
            .byte_headers()
            .with_context(|| format!("cannot read the header of {}", opts.input.display()))?
            .clone();
        if header.is_empty() || (header.len() == 1 && header[0].is_empty()) {
            bail!("{} has no header row (the first line must name the columns)", opts.input.display());
        }
        let mut header_names = Vec::with_capacity(header.len());
        for field in header.iter() {
            let name = std::str::from_utf8(field).map_err(|_| {
                anyhow::anyhow!("the header of {} is not valid UTF-8", opts.input.display())
            })?;
            header_names.push(name.to_string());
        }
        let find = |name: &str, flag: &str| -> Result<usize> {
            header_names.iter().position(|h| h == name).ok_or_else(|| {
                anyhow::anyhow!(
                    "{flag} '{name}' is not a column of {}; its columns are: {}",
                    opts.input.display(),
                    header_names.iter().map(|h| format!("'{h}'")).collect::<Vec<_>>().join(", ")
                )
            })
        };
        let source_idx = find(&opts.source_column, "--source-column")?;
        let target_idx = find(&opts.target_column, "--target-column")?;
        for added in output_columns(opts.per_token) {
            if header_names.iter().any(|h| h == added) {
                bail!(
                    "{} already has a column named '{added}', which `score` adds; rename it first",
                    opts.input.display()
                );
            }
        }
        Ok(Self { reader, header, header_names, source_idx, target_idx })
    }
}

pub(super) fn csv_reader(delimiter: u8, file: File) -> csv::Reader<File> {
    csv::ReaderBuilder::new().delimiter(delimiter).flexible(true).has_headers(true).from_reader(file)
}

pub(super) fn output_columns(per_token: bool) -> Vec<&'static str> {
    let mut cols = ADDED_COLUMNS.to_vec();
    if per_token {
        cols.push(PER_TOKEN_COLUMN);
    }
    cols
}


pub(super) fn count_records(path: &Path, delimiter: u8) -> Result<u64> {
    let mut reader = csv_reader(delimiter, File::open(path)?);
    let mut record = ByteRecord::new();
    let mut n = 0;
    while reader.read_byte_record(&mut record)? {
        n += 1;
    }
    Ok(n)
}


/// One field as text, or why the row cannot be scored.
pub(super) fn field<'r>(rec: &'r ByteRecord, idx: usize, name: &str) -> std::result::Result<&'r str, String> {
    let bytes = rec.get(idx).ok_or_else(|| format!("missing field '{name}'"))?;
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("invalid UTF-8 in '{name}' at byte {}", e.valid_up_to()))?;
    if text.trim().is_empty() {
        return Err(format!("empty '{name}'"));
    }
    Ok(text)
}
