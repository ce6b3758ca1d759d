//! `tchseq merge`: the shards' outputs of `translate --num-shards` or `score --num-shards` back
//! into the single run's output, byte for byte. Records are kept as written and only put back
//! in order (score's `row` column, which sharding adds last, is cut off again).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::args::MergeArgs;
use super::Outcome;

/// One record of a shard's output: its id and its bytes as the single run writes them.
struct Record {
    id: u64,
    bytes: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// translate --format jsonl: `"id"`.
    TranslateJsonl,
    /// score --format jsonl: `"row"`, the last key.
    ScoreJsonl,
    /// translate --format fairseq: `S-17\t...` line groups.
    Fairseq,
    /// score CSV/TSV: a header, then rows whose last field is `row`.
    Csv(u8),
}

pub fn run(a: &MergeArgs) -> Result<Outcome> {
    let mut header: Option<(Vec<u8>, PathBuf)> = None;
    let mut kind: Option<Kind> = None;
    let mut records: Vec<(Record, usize)> = Vec::new();
    for (f, path) in a.files.iter().enumerate() {
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        if data.is_empty() {
            continue;
        }
        let this = detect(&data).with_context(|| format!("{}: not an output of translate --num-shards or score --num-shards", path.display()))?;
        match kind {
            Some(k) if k != this => bail!("{}: a different kind of output than {}", path.display(), a.files[0].display()),
            _ => kind = Some(this),
        }
        let (head, recs) = parse(this, &data).with_context(|| path.display().to_string())?;
        if let Some(head) = head {
            match &header {
                Some((h, first)) if *h != head => bail!("{}: its header differs from that of {}", path.display(), first.display()),
                Some(_) => {}
                None => header = Some((head, path.clone())),
            }
        }
        records.extend(recs.into_iter().map(|r| (r, f)));
    }
    let Some(_) = kind else { bail!("the files hold no records") };
    records.sort_by_key(|(r, _)| r.id);
    let name = |f: usize| a.files[f].display().to_string();
    for w in records.windows(2) {
        let ((prev, pf), (next, nf)) = (&w[0], &w[1]);
        if prev.id == next.id {
            bail!("record {} is in {} and in {} (a shard given twice?)", prev.id, name(*pf), name(*nf));
        }
        if next.id != prev.id + 1 {
            bail!("records {} to {} are in none of the files (a shard missing?)", prev.id + 1, next.id - 1);
        }
    }
    if let Some((first, _)) = records.first() {
        if first.id != 0 {
            bail!("records 0 to {} are in none of the files (a shard missing?)", first.id - 1);
        }
    }
    if let Some(n) = a.lines {
        let have = records.len() as u64;
        if have != n {
            bail!("--lines {n}, but the files hold {have} records (a shard missing?)");
        }
    }
    let mut out = std::io::stdout().lock();
    if let Some((h, _)) = &header {
        out.write_all(h)?;
    }
    for (r, _) in &records {
        out.write_all(&r.bytes)?;
    }
    out.flush()?;
    Ok(Outcome::Ok)
}

fn detect(data: &[u8]) -> Option<Kind> {
    let first_line = data.split(|&b| b == b'\n').next()?;
    if first_line.starts_with(b"{") {
        let v: serde_json::Value = serde_json::from_slice(first_line).ok()?;
        return if v.get("row").is_some() {
            Some(Kind::ScoreJsonl)
        } else if v.get("id").is_some() {
            Some(Kind::TranslateJsonl)
        } else {
            None
        };
    }
    if fairseq_id(first_line).is_some() {
        return Some(Kind::Fairseq);
    }
    for delimiter in [b',', b'\t', b';', b'|'] {
        let mut suffix = vec![delimiter];
        suffix.extend_from_slice(b"row");
        if first_line.strip_suffix(b"\r").unwrap_or(first_line).ends_with(&suffix) {
            return Some(Kind::Csv(delimiter));
        }
    }
    None
}

/// `S-17\t...` → 17 (every line of translate's fairseq format starts so).
fn fairseq_id(line: &[u8]) -> Option<u64> {
    let (tag, rest) = (line.first()?, line.get(1..)?);
    if !tag.is_ascii_uppercase() || rest.first() != Some(&b'-') {
        return None;
    }
    let digits: &[u8] = rest[1..].split(|&b| b == b'\t').next()?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn lines_of(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    data.split_inclusive(|&b| b == b'\n')
}

fn parse(kind: Kind, data: &[u8]) -> Result<(Option<Vec<u8>>, Vec<Record>)> {
    let mut records = Vec::new();
    match kind {
        Kind::TranslateJsonl | Kind::ScoreJsonl => {
            for (n, line) in lines_of(data).enumerate() {
                let v: serde_json::Value = serde_json::from_slice(line).with_context(|| format!("line {}: not JSON", n + 1))?;
                let key = if kind == Kind::ScoreJsonl { "row" } else { "id" };
                let id = v.get(key).and_then(serde_json::Value::as_u64).with_context(|| format!("line {}: no \"{key}\"", n + 1))?;
                let bytes = if kind == Kind::ScoreJsonl {
                    let suffix = format!(",\"row\":{id}}}\n");
                    let body = line.strip_suffix(suffix.as_bytes()).with_context(|| format!("line {}: \"row\" is not the last key", n + 1))?;
                    [body, b"}\n"].concat()
                } else {
                    line.to_vec()
                };
                records.push(Record { id, bytes });
            }
        }
        Kind::Fairseq => {
            for (n, line) in lines_of(data).enumerate() {
                let id = fairseq_id(line).with_context(|| format!("line {}: not a fairseq output line", n + 1))?;
                match records.last_mut() {
                    Some(Record { id: last, bytes }) if *last == id => bytes.extend_from_slice(line),
                    _ => records.push(Record { id, bytes: line.to_vec() }),
                }
            }
        }
        Kind::Csv(delimiter) => {
            let mut reader = csv::ReaderBuilder::new().delimiter(delimiter).has_headers(false).flexible(true).from_reader(data);
            let mut rec = csv::ByteRecord::new();
            let mut starts = Vec::new();
            let mut ids = Vec::new();
            loop {
                let start = reader.position().byte() as usize;
                if !reader.read_byte_record(&mut rec).context("not CSV")? {
                    break;
                }
                starts.push(start);
                let last = rec.get(rec.len().saturating_sub(1)).unwrap_or(b"");
                ids.push(std::str::from_utf8(last).ok().and_then(|s| s.parse::<u64>().ok()));
            }
            starts.push(data.len());
            let cut = |raw: &[u8]| -> Result<Vec<u8>> {
                let (body, end) = match raw.strip_suffix(b"\r\n") {
                    Some(b) => (b, &b"\r\n"[..]),
                    None => raw.strip_suffix(b"\n").map_or((raw, &b""[..]), |b| (b, &b"\n"[..])),
                };
                let at = body.iter().rposition(|&b| b == delimiter).context("a row without its `row` column")?;
                Ok([&body[..at], end].concat())
            };
            let header = cut(&data[starts[0]..starts[1]])?;
            for k in 1..ids.len() {
                let id = ids[k].with_context(|| format!("record {k}: its last field is not a row number"))?;
                records.push(Record { id, bytes: cut(&data[starts[k]..starts[k + 1]])? });
            }
            return Ok((Some(header), records));
        }
    }
    Ok((None, records))
}

