//! The input table's columns, apart from files and models: the reader's CSV dialect, the header
//! checked against the columns asked for, and one row's two fields. The fuzz crate compiles this
//! file in (fuzz/src/lib.rs), so it depends on nothing but `csv`.

use csv::ByteRecord;

/// The dialect every `score` input is read in (and re-read in when `--resume` seeks).
pub fn csv_reader<R: std::io::Read>(delimiter: u8, input: R) -> csv::Reader<R> {
    csv::ReaderBuilder::new().delimiter(delimiter).flexible(true).has_headers(true).from_reader(input)
}

/// Moves `reader` to a row start it reported before (`position()`), as `--resume` does.
///
/// csv strips a UTF-8 BOM from the first bytes it reads after a seek, so a row that begins with
/// one would lose it. Seeking one byte earlier, onto the previous row's terminator (a blank line
/// to csv), makes the row's own bytes not the first read.
pub fn seek_to_row<R: std::io::Read + std::io::Seek>(reader: &mut csv::Reader<R>, row_start: &csv::Position) -> csv::Result<()> {
    let Some(before) = row_start.byte().checked_sub(1) else { return reader.seek(row_start.clone()) };
    let mut pos = row_start.clone();
    pos.set_byte(before).set_line(row_start.line().saturating_sub(1).max(1));
    reader.seek_raw(std::io::SeekFrom::Start(before), pos)
}

/// Why a header cannot be used. `Display` names the input as `what` and the flags as the CLI's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    Empty,
    NotUtf8,
    Missing { flag: &'static str, name: String, columns: Vec<String> },
    Taken(String),
}

impl HeaderError {
    pub fn message(&self, what: &str) -> String {
        match self {
            Self::Empty => format!("{what} has no header row (the first line must name the columns)"),
            Self::NotUtf8 => format!("the header of {what} is not valid UTF-8"),
            Self::Missing { flag, name, columns } => {
                let tabs = columns.iter().any(|c| c.contains('\t'));
                format!(
                    "{flag} '{name}' is not a column of {what}; its columns are: {}{}",
                    columns.iter().map(|h| format!("'{h}'")).collect::<Vec<_>>().join(", "),
                    if tabs { " (the header has tabs: for a tab-separated file pass --delimiter '\\t')" } else { "" }
                )
            }
            Self::Taken(added) => {
                format!("{what} already has a column named '{added}', which `score` adds; rename it first")
            }
        }
    }
}

/// The header's names and where the source and target columns are.
#[derive(Debug, Clone)]
pub struct Columns {
    pub names: Vec<String>,
    pub source: usize,
    pub target: usize,
    /// Columns naming each row's source and target language (multilingual models).
    pub source_lang: Option<usize>,
    pub target_lang: Option<usize>,
}

impl Columns {
    /// Checks `header` names `source` and `target`, and none of the `added` output columns.
    pub fn resolve(header: &ByteRecord, source: &str, target: &str, added: &[&str]) -> Result<Self, HeaderError> {
        if header.is_empty() || (header.len() == 1 && header[0].is_empty()) {
            return Err(HeaderError::Empty);
        }
        let names = header
            .iter()
            .map(|f| std::str::from_utf8(f).map(str::to_string))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| HeaderError::NotUtf8)?;
        let find = |name: &str, flag: &'static str| {
            names.iter().position(|h| h == name).ok_or_else(|| HeaderError::Missing {
                flag,
                name: name.to_string(),
                columns: names.clone(),
            })
        };
        let source = find(source, "--source-column")?;
        let target = find(target, "--target-column")?;
        if let Some(taken) = added.iter().find(|a| names.iter().any(|h| h == *a)) {
            return Err(HeaderError::Taken(taken.to_string()));
        }
        Ok(Self { names, source, target, source_lang: None, target_lang: None })
    }

    /// Adds the columns of each row's languages (`--source-lang-column`/`--target-lang-column`).
    pub fn with_languages(mut self, source_lang: Option<&str>, target_lang: Option<&str>) -> Result<Self, HeaderError> {
        let find = |name: &str, flag: &'static str| {
            self.names.iter().position(|h| h == name).ok_or_else(|| HeaderError::Missing { flag, name: name.to_string(), columns: self.names.clone() })
        };
        self.source_lang = source_lang.map(|n| find(n, "--source-lang-column")).transpose()?;
        self.target_lang = target_lang.map(|n| find(n, "--target-lang-column")).transpose()?;
        Ok(self)
    }

    /// A row's languages from the language columns (None where no column names it).
    pub fn languages<'r>(&self, rec: &'r ByteRecord) -> Result<(Option<&'r str>, Option<&'r str>), String> {
        let get = |idx: Option<usize>, name: &str| idx.map(|i| field(rec, i, name).map(str::trim)).transpose();
        Ok((get(self.source_lang, "source language")?, get(self.target_lang, "target language")?))
    }

    /// A row's source and target text, or why this row (and only it) cannot be scored.
    pub fn fields<'r>(&self, rec: &'r ByteRecord, source: &str, target: &str) -> Result<(&'r str, &'r str), String> {
        if rec.len() < self.names.len() {
            return Err(format!("ragged row: {} fields, the header has {}", rec.len(), self.names.len()));
        }
        if rec.len() > self.names.len() {
            // the output keeps the header's columns: the fields past them go into the reason
            let extra: Vec<String> = rec.iter().skip(self.names.len()).map(|f| String::from_utf8_lossy(f).into_owned()).collect();
            return Err(format!(
                "ragged row: {} fields, the header has {}; the fields past the header: {}",
                rec.len(),
                self.names.len(),
                serde_json::to_string(&extra).unwrap_or_default()
            ));
        }
        Ok((field(rec, self.source, source)?, field(rec, self.target, target)?))
    }
}

/// One field as text, or why the row cannot be scored.
fn field<'r>(rec: &'r ByteRecord, idx: usize, name: &str) -> Result<&'r str, String> {
    let bytes = rec.get(idx).ok_or_else(|| format!("missing field '{name}'"))?;
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("invalid UTF-8 in '{name}' at byte {}", e.valid_up_to()))?;
    if text.trim().is_empty() {
        return Err(format!("empty '{name}'"));
    }
    Ok(text)
}
