//! Input lines as fairseq-interactive reads them, except that a line which is not UTF-8 is
//! reported on its own instead of ending the run, so every other line is still read and keeps
//! its number. Shared by `translate`, `encode` and `decode`.

use std::io::{self, BufRead};

use anyhow::{bail, Result};

/// Why one input line was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// Short and the same for every line that fails the same way (counted at the end of a run).
    pub kind: &'static str,
    /// The whole reason, for this line's error.
    pub reason: String,
}

pub const NOT_UTF8: &str = "not valid UTF-8";

/// One line without its terminator, or why it cannot be used; read errors are the outer error.
pub type Line = std::result::Result<String, BadLine>;

/// Where lines end. fairseq-interactive opens `--input FILE` in Python's text mode (universal
/// newlines) but reads stdin as `sys.stdin` is set up on Linux and macOS (`newline="\n"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Newlines {
    /// `\n`, `\r\n` and a lone `\r` each end a line.
    Universal,
    /// `\n` ends a line, a `\r` right before it is dropped, a lone `\r` stays in the line.
    Lf,
}

/// The lines of `reader`; a last line without a terminator is a line too.
pub struct Lines<R> {
    reader: R,
    newlines: Newlines,
    /// The previous line ended with `\r`: a `\n` right after it belongs to that terminator.
    skip_lf: bool,
    buf: Vec<u8>,
}

pub fn lines<R: BufRead>(reader: R, newlines: Newlines) -> Lines<R> {
    Lines { reader, newlines, skip_lf: false, buf: Vec::new() }
}

impl<R: BufRead> Iterator for Lines<R> {
    type Item = io::Result<Line>;

    fn next(&mut self) -> Option<Self::Item> {
        self.buf.clear();
        loop {
            let available = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(Err(e)),
            };
            if available.is_empty() {
                return if self.buf.is_empty() { None } else { Some(Ok(decode(std::mem::take(&mut self.buf)))) };
            }
            let start = usize::from(std::mem::take(&mut self.skip_lf) && available[0] == b'\n');
            let universal = self.newlines == Newlines::Universal;
            match available[start..].iter().position(|&b| b == b'\n' || (universal && b == b'\r')) {
                Some(i) => {
                    let end = start + i;
                    self.buf.extend_from_slice(&available[start..end]);
                    self.skip_lf = available[end] == b'\r';
                    self.reader.consume(end + 1);
                    if !universal && self.buf.last() == Some(&b'\r') {
                        self.buf.pop();
                    }
                    return Some(Ok(decode(std::mem::take(&mut self.buf))));
                }
                None => {
                    let n = available.len();
                    self.buf.extend_from_slice(&available[start..]);
                    self.reader.consume(n);
                }
            }
        }
    }
}

fn decode(bytes: Vec<u8>) -> Line {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let byte = e.as_bytes()[at];
        BadLine { kind: NOT_UTF8, reason: format!("{NOT_UTF8} (byte 0x{byte:02X} at offset {at})") }
    })
}

/// The lines of a run that failed, by kind, for the one error line that ends the run.
#[derive(Debug, Default)]
pub struct Failures {
    kinds: Vec<(String, usize)>,
}

impl Failures {
    /// Lines counted so far.
    pub fn count(&self) -> usize {
        self.kinds.iter().map(|(_, n)| n).sum()
    }

    pub fn add(&mut self, kind: &str) {
        match self.kinds.iter_mut().find(|(k, _)| k == kind) {
            Some((_, n)) => *n += 1,
            None => self.kinds.push((kind.to_string(), 1)),
        }
    }

    /// `Err("N input line(s) were not <done>: <kind>")` (kinds with their counts when there
    /// are several) when any line failed.
    pub fn finish(&self, done: &str) -> Result<()> {
        let total: usize = self.kinds.iter().map(|(_, n)| n).sum();
        match self.kinds.as_slice() {
            [] => Ok(()),
            [(kind, _)] => bail!("{total} input line(s) were not {done}: {kind}"),
            kinds => {
                let parts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
                bail!("{total} input line(s) were not {done}: {}", parts.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8], capacity: usize, newlines: Newlines) -> Vec<Line> {
        lines(io::BufReader::with_capacity(capacity, bytes), newlines).map(|l| l.unwrap()).collect()
    }

    fn check(cases: &[(&[u8], &[&str])], newlines: Newlines) {
        for (input, want) in cases {
            for capacity in [1, 2, 3, 64] {
                let got: Vec<String> = read(input, capacity, newlines).into_iter().map(|l| l.unwrap()).collect();
                assert_eq!(got, *want, "{input:?} read {capacity} bytes at a time");
            }
        }
    }

    #[test]
    fn universal_newlines_as_python_reads_a_file() {
        // fileinput.input(files=[path], openhook=fileinput.hook_encoded("utf-8")) in Python 3.11
        let cases: &[(&[u8], &[&str])] = &[
            (b"", &[]),
            (b"a", &["a"]),
            (b"a\n", &["a"]),
            (b"a\r\nb\r\n", &["a", "b"]),
            (b"a\rb\n", &["a", "b"]),
            (b"a\r\r\nb", &["a", "", "b"]),
            (b"\n\n", &["", ""]),
            (b"a\r", &["a"]),
            (b"a\n\r\n\rb", &["a", "", "", "b"]),
            ("x\u{0}y\u{2028}z\u{85}\x0c\n".as_bytes(), &["x\u{0}y\u{2028}z\u{85}\x0c"]),
        ];
        check(cases, Newlines::Universal);
    }

    #[test]
    fn lf_newlines_as_python_reads_stdin() {
        // sys.stdin on Linux, then the one `\r` of a `\r\n` dropped
        let cases: &[(&[u8], &[&str])] = &[
            (b"", &[]),
            (b"a", &["a"]),
            (b"a\r\nb\r\n", &["a", "b"]),
            (b"a\rb\n", &["a\rb"]),
            (b"a\r\r\nb", &["a\r", "b"]),
            (b"\n\n", &["", ""]),
            (b"a\r", &["a\r"]),
            (b"\r\n\r", &["", "\r"]),
        ];
        check(cases, Newlines::Lf);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_reported_alone() {
        let got = read(b"ok\n\xc3\x28 x\r\nfine\n", 2, Newlines::Universal);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_deref(), Ok("ok"));
        let bad = got[1].clone().unwrap_err();
        assert_eq!(bad.kind, NOT_UTF8);
        assert_eq!(bad.reason, "not valid UTF-8 (byte 0xC3 at offset 0)");
        assert_eq!(got[2].as_deref(), Ok("fine"));
    }

    #[test]
    fn failures_name_their_kinds() {
        let mut f = Failures::default();
        assert!(f.finish("read").is_ok());
        f.add(NOT_UTF8);
        f.add(NOT_UTF8);
        assert_eq!(f.finish("read").unwrap_err().to_string(), "2 input line(s) were not read: not valid UTF-8");
        f.add("too long");
        assert_eq!(
            f.finish("read").unwrap_err().to_string(),
            "3 input line(s) were not read: 2 not valid UTF-8, 1 too long"
        );
    }
}
