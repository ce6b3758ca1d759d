//! The input table: CSV/TSV records and their checked header.

use super::*;
use anyhow::{Context, Result};
use csv::ByteRecord;
use std::fs::File;
use std::path::Path;

/// The opened input with its header checked.
pub struct Input {
    pub(super) reader: csv::Reader<File>,
    pub(super) header: ByteRecord,
    pub(super) columns: Columns,
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
        let columns =
            Columns::resolve(&header, &opts.source_column, &opts.target_column, &output_columns(opts.per_token))
                .and_then(|c| c.with_languages(opts.source_lang_column.as_deref(), opts.target_lang_column.as_deref()))
                .map_err(|e| anyhow::anyhow!(e.message(&opts.input.display().to_string())))?;
        Ok(Self { reader, header, columns })
    }

    pub(super) fn header_names(&self) -> &[String] {
        &self.columns.names
    }
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
