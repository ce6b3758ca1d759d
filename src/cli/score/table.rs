//! The input table: CSV/TSV records and their checked header.

use super::*;
use anyhow::{Context, Result};
use csv::ByteRecord;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// `--input -`: the rows come from stdin, as `translate` reads its lines without `--input`.
pub(super) fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Where the rows come from: a file (which `--resume` seeks in) or stdin (which it cannot).
pub enum Source {
    File(File),
    Stdin(io::Stdin),
}

impl Source {
    pub(super) fn open(path: &Path) -> io::Result<Self> {
        if is_stdin(path) {
            return Ok(Source::Stdin(io::stdin()));
        }
        File::open(path).map(Source::File)
    }
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::File(f) => f.read(buf),
            Source::Stdin(s) => s.read(buf),
        }
    }
}

impl Seek for Source {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        match self {
            Source::File(f) => f.seek(pos),
            Source::Stdin(_) => Err(io::Error::new(io::ErrorKind::Unsupported, "stdin cannot be read again")),
        }
    }
}

/// The opened input with its header checked.
pub struct Input {
    pub(super) reader: csv::Reader<Source>,
    pub(super) header: ByteRecord,
    pub(super) columns: Columns,
}

impl Input {
    pub fn open(opts: &Options) -> Result<Self> {
        let file = Source::open(&opts.input)
            .with_context(|| format!("cannot open --input {}", opts.input.display()))?;
        let mut reader = csv_reader(opts.delimiter, file);
        let header = reader
            .byte_headers()
            .with_context(|| format!("cannot read the header of {}", input_name(&opts.input)))?
            .clone();
        let columns =
            Columns::resolve(&header, &opts.source_column, &opts.target_column, &output_columns(opts.per_token))
                .and_then(|c| c.with_languages(opts.source_lang_column.as_deref(), opts.target_lang_column.as_deref()))
                .map_err(|e| anyhow::anyhow!(e.message(&input_name(&opts.input))))?;
        Ok(Self { reader, header, columns })
    }

    pub(super) fn header_names(&self) -> &[String] {
        &self.columns.names
    }
}

/// The input as messages name it: its path, or `stdin`.
pub(super) fn input_name(path: &Path) -> String {
    if is_stdin(path) { "stdin".to_string() } else { path.display().to_string() }
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
