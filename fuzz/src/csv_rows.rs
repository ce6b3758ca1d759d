//! The `csv_rows` target's check, shared with the stable-Rust corpus replay
//! (tests/it/fuzz_corpus.rs): a table read as `tchseq score` reads it, then re-read from where
//! rows began, as `--resume` seeks.

use std::io::Cursor;

use csv::ByteRecord;

use super::columns::{csv_reader, seek_to_row, Columns};

/// At most this many rows of one input are read (keeps each run short).
const MAX_ROWS: usize = 4096;

/// The first byte picks the dialect (CSV or TSV); the rest is the file. Every row's fields are
/// taken as `score` takes them; then a fresh reader seeks to where the first, middle and last
/// rows began and must read the same records again. A panic or a differing record is a finding.
pub fn csv_rows(data: &[u8]) {
    let Some((&first, table)) = data.split_first() else { return };
    let delimiter = if first & 1 == 0 { b',' } else { b'\t' };
    let mut reader = csv_reader(delimiter, Cursor::new(table));
    let Ok(header) = reader.byte_headers().cloned() else { return };
    let columns = Columns::resolve(&header, "source", "target", &["logprob", "error"]);
    let (mut starts, mut rows) = (Vec::new(), Vec::new());
    let mut record = ByteRecord::new();
    while rows.len() < MAX_ROWS {
        let start = reader.position().clone();
        match reader.read_byte_record(&mut record) {
            Ok(true) => {}
            Ok(false) | Err(_) => break,
        }
        if let Ok(columns) = &columns {
            if let Ok((source, target)) = columns.fields(&record, "source", "target") {
                assert!(!source.trim().is_empty() && !target.trim().is_empty());
            }
        }
        starts.push(start);
        rows.push(record.clone());
    }
    for k in [0, rows.len() / 2, rows.len().saturating_sub(1)] {
        let Some(start) = starts.get(k) else { continue };
        let mut again = csv_reader(delimiter, Cursor::new(table));
        seek_to_row(&mut again, start).expect("seek within the same bytes");
        let mut same = ByteRecord::new();
        let read = again.read_byte_record(&mut same).expect("the record read before reads again");
        assert!(read, "row {k} vanished after a seek to its start");
        assert_eq!(same.iter().collect::<Vec<_>>(), rows[k].iter().collect::<Vec<_>>(), "row {k} differs after a seek");
    }
}
