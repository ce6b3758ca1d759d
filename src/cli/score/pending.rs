//! Rows of the current chunk that are scored but not yet written: a row goes into
//! `<output>.partial` only when every row before it is there, and the chunk's batches are
//! ordered by length, so most rows finish before their turn. Each finished batch's rows are
//! appended to `<output>.partial.pending` (its length kept in the progress file), and `--resume`
//! takes them back instead of scoring their batches again.

use anyhow::{bail, Result};

use super::RowResult;

/// What a row adds to the run's [`super::Summary`]: `(logprob, avg_logprob, tokens)` when scored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RowTotals(pub(super) Option<(f32, f32, u64)>);

impl RowTotals {
    pub(super) fn of(result: &RowResult) -> Self {
        Self(result.as_ref().ok().map(|row| (row.scored.logprob, row.scored.avg_logprob, row.target.len() as u64)))
    }
}

/// A finished row: its output bytes, and what it adds to the summary.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Finished {
    pub(super) bytes: Vec<u8>,
    pub(super) totals: RowTotals,
}

/// One pending row as appended to the pending file (little-endian): the row's index in its
/// chunk (u64), 1 if scored else 0 (u8), logprob and avg_logprob (f32 bits), tokens (u64),
/// the length of its output bytes (u64), then those bytes.
pub(super) fn encode(out: &mut Vec<u8>, row: usize, finished: &Finished) {
    let (scored, logprob, avg, tokens) = match finished.totals.0 {
        Some((logprob, avg, tokens)) => (1u8, logprob, avg, tokens),
        None => (0u8, 0.0, 0.0, 0),
    };
    out.extend((row as u64).to_le_bytes());
    out.push(scored);
    out.extend(logprob.to_bits().to_le_bytes());
    out.extend(avg.to_bits().to_le_bytes());
    out.extend(tokens.to_le_bytes());
    out.extend((finished.bytes.len() as u64).to_le_bytes());
    out.extend(&finished.bytes);
}

/// The rows [`encode`] wrote into `data`, in the order written.
pub(super) fn decode(mut data: &[u8]) -> Result<Vec<(usize, Finished)>> {
    fn take<'a>(data: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
        if data.len() < n {
            bail!("a record is cut short");
        }
        let (head, rest) = data.split_at(n);
        *data = rest;
        Ok(head)
    }
    fn u64_of(data: &mut &[u8]) -> Result<u64> {
        Ok(u64::from_le_bytes(take(data, 8)?.try_into()?))
    }
    fn f32_of(data: &mut &[u8]) -> Result<f32> {
        Ok(f32::from_bits(u32::from_le_bytes(take(data, 4)?.try_into()?)))
    }
    let mut rows = Vec::new();
    while !data.is_empty() {
        let row = usize::try_from(u64_of(&mut data)?)?;
        let scored = take(&mut data, 1)?[0];
        let (logprob, avg, tokens) = (f32_of(&mut data)?, f32_of(&mut data)?, u64_of(&mut data)?);
        let len = usize::try_from(u64_of(&mut data)?)?;
        let bytes = take(&mut data, len)?.to_vec();
        let totals = match scored {
            0 => RowTotals(None),
            1 => RowTotals(Some((logprob, avg, tokens))),
            other => bail!("a record says {other} where 0 or 1 belongs"),
        };
        rows.push((row, Finished { bytes, totals }));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_rows_read_back_as_written() {
        let rows = [
            (3, Finished { bytes: b"a,b,-1.5,3,-0.5,1.6487212707001282,\n".to_vec(), totals: RowTotals(Some((-1.5, -0.5, 3))) }),
            (0, Finished { bytes: b"x,,,,,,\"scoring failed: \xff\"\n".to_vec(), totals: RowTotals(None) }),
            (9, Finished { bytes: Vec::new(), totals: RowTotals(Some((f32::MIN_POSITIVE, -0.0, u64::MAX))) }),
        ];
        let mut data = Vec::new();
        for (row, f) in &rows {
            encode(&mut data, *row, f);
        }
        assert_eq!(decode(&data).unwrap(), rows.to_vec());
        // a file cut anywhere but between records is refused; between them it holds the first ones
        for cut in 1..data.len() {
            if let Ok(back) = decode(&data[..cut]) {
                assert!(!back.is_empty() && back[..] == rows[..back.len()], "cut at {cut}");
            }
        }
    }
}
