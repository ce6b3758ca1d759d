//! sacreBLEU 2.5.1's multi-system output (`utils.print_results_table`, `_format_score_lines`):
//! `json.dumps(..., indent=4)` of the results, or a `tabulate` 0.10 `fancy_grid` table (colours
//! off, as when `--no-color` is given or stdout is not a terminal) followed by the paired test's
//! explanation and the metric signatures.

use super::format::{py_fixed, py_float_repr};
use super::numpy_math::NpFloat;
use super::significance::{PairedColumn, TestResult};
use super::{py_strip, MetricError};

/// A cell of the results: a formatted score (plain multi-system mode) or a test's result.
#[derive(Clone, Debug)]
pub enum Cell {
    Text(String),
    Result(TestResult),
}

/// `scores` as `print_results_table` takes it: the system names, then one column per metric
/// (named by the score's name), and one signature per metric.
#[derive(Clone, Debug)]
pub struct ResultsTable {
    pub systems: Vec<String>,
    pub columns: Vec<(String, Vec<Cell>)>,
    pub signatures: Vec<(String, String)>,
    /// The paired test, with the `--paired-bs-n` or `--paired-ar-n` given (the explanation names
    /// it even when it is not above 0 and the default was used).
    pub paired: Option<(PairedTest, i64)>,
}

/// `--paired-bs` or `--paired-ar`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairedTest {
    Bootstrap,
    ApproximateRandomization,
}

impl ResultsTable {
    /// The table of a paired bootstrap test; `names[0]` is the baseline's name as given.
    pub fn paired(names: &[String], columns: Vec<PairedColumn>, test: PairedTest, n: i64, short: bool) -> Self {
        let mut systems = names.to_vec();
        if let Some(first) = systems.first_mut() {
            *first = format!("Baseline: {first}");
        }
        let signatures = columns.iter().map(|c| (c.name.clone(), c.signature.format(short))).collect();
        let columns = columns
            .into_iter()
            .map(|c| (c.name, c.results.into_iter().map(Cell::Result).collect()))
            .collect();
        Self { systems, columns, signatures, paired: Some((test, n)) }
    }

    /// Exactly what the CLI prints.
    pub fn print(&self, json: bool, width: usize) -> Result<String, MetricError> {
        if json {
            self.print_json()
        } else {
            Ok(self.print_text(width))
        }
    }

    fn print_json(&self) -> Result<String, MetricError> {
        let float = |x: NpFloat| match x {
            NpFloat::Py(v) => Ok(json_float(v)),
            NpFloat::F32(_) => Err(MetricError::SacrebleuFails(
                "its JSON output of these results fails (TypeError: Object of type float32 is not JSON \
                 serializable); use -f text"
                    .into(),
            )),
        };
        let opt = |x: Option<f64>| x.map_or("null".to_string(), json_float);
        let mut systems = Vec::new();
        for (i, name) in self.systems.iter().enumerate() {
            let mut entries = vec![format!("        \"system\": {}", json_ascii(name))];
            for (metric, cells) in &self.columns {
                let value = match &cells[i] {
                    Cell::Text(s) => json_ascii(s),
                    Cell::Result(r) => format!(
                        "{{\n            \"score\": {},\n            \"p_value\": {},\n            \"mean\": {},\n            \"ci\": {}\n        }}",
                        json_float(r.score),
                        opt(r.p_value),
                        r.mean.map_or(Ok("null".to_string()), float)?,
                        r.ci.map_or(Ok("null".to_string()), float)?
                    ),
                };
                entries.push(format!("        {}: {value}", json_ascii(metric)));
            }
            systems.push(format!("    {{\n{}\n    }}", entries.join(",\n")));
        }
        Ok(format!("[\n{}\n]\n", systems.join(",\n")))
    }

    fn print_text(&self, width: usize) -> String {
        let mut headers = vec!["System".to_string()];
        let mut cols: Vec<Vec<String>> = vec![self.systems.clone()];
        let mut is_bootstrap = false;
        for (metric, cells) in &self.columns {
            let mut vals = Vec::new();
            for cell in cells {
                vals.push(match cell {
                    Cell::Text(s) => s.clone(),
                    Cell::Result(r) => {
                        let mut s = py_fixed(r.score, width);
                        if let (Some(mean), Some(ci)) = (r.mean, r.ci) {
                            is_bootstrap = true;
                            s += &format!(" ({} ± {})", py_fixed(mean.value(), width), py_fixed(ci.value(), width));
                        }
                        if let Some(p) = r.p_value {
                            s += &format!("\n(p = {}){}", py_fixed(p, 4), if p > 0.05 { "" } else { "*" });
                        }
                        s
                    }
                });
            }
            headers.push(if is_bootstrap { format!("{metric} (μ ± 95% CI)") } else { metric.clone() });
            cols.push(vals);
        }
        let mut out = fancy_grid(&headers, &cols);
        out.push_str("\n\n");
        if let Some((test, n)) = self.paired {
            out.push_str(&paired_explanation(test, n, &self.systems[0]));
        }
        out.push_str("-----------------\nMetric signatures\n-----------------\n");
        for (name, sig) in &self.signatures {
            let pad = 10usize.saturating_sub(name.chars().count());
            out.push_str(&format!(" - {name}{} {sig}\n", " ".repeat(pad)));
        }
        out
    }
}

fn paired_explanation(test: PairedTest, n: i64, baseline: &str) -> String {
    let (msg, provided) = match test {
        PairedTest::Bootstrap => (
            format!("Paired bootstrap resampling test with {n} resampling trials"),
            "Actual system score / bootstrap estimated true mean / 95% CI are provided for each metric.",
        ),
        PairedTest::ApproximateRandomization => (
            format!("Paired approximate randomization test with {n} trials"),
            "Actual system score is provided for each metric.",
        ),
    };
    let rule = "-".repeat(msg.chars().count());
    format!(
        "{rule}\n{msg}\n{rule}\n - Each system is pairwise compared to {baseline}.\n   {provided}\n\n - Null hypothesis: the system and the \
         baseline translations are essentially\n   generated by the same underlying process. For a given system \
         and the baseline,\n   the p-value is roughly the probability of the absolute score difference (delta)\n   \
         or higher occurring due to chance, under the assumption that the null hypothesis is correct.\n\n - \
         Assuming a significance threshold of 0.05, the null hypothesis can be rejected\n   for p-values < 0.05 \
         (marked with \"*\"). This means that the delta is unlikely to be attributed\n   to chance, hence the \
         system is significantly \"different\" than the baseline.\n   Otherwise, the p-values are highlighted \
         in red.\n\n - NOTE: Significance does not tell whether a system is \"better\" than the baseline but \
         rather\n   emphasizes the \"difference\" of the systems in terms of the replicability of the delta.\n\n"
    )
}

/// `json.dumps` of a float (`NaN`, `Infinity` as Python writes them).
fn json_float(x: f64) -> String {
    py_float_repr(x)
}

/// `json.dumps` of a string with `ensure_ascii=True`.
fn json_ascii(s: &str) -> String {
    super::format::json_dumps_str(s, true)
}

fn width(s: &str) -> usize {
    s.chars().count()
}

/// Python's `str.splitlines()` for the line breaks these cells can hold.
fn lines(s: &str) -> Vec<&str> {
    s.split('\n').collect()
}

/// `'{:>{w}}'`, `'{:^{w}}'`.
fn pad(s: &str, w: usize, right: bool) -> String {
    let extra = w.saturating_sub(width(s));
    let left = if right { extra } else { extra / 2 };
    format!("{}{s}{}", " ".repeat(left), " ".repeat(extra - left))
}

/// `tabulate(columns, headers, tablefmt='fancy_grid', colalign=('right',), stralign='center')`
/// for string cells: the first column right-aligned, the others centred; no final newline.
fn fancy_grid(headers: &[String], cols: &[Vec<String>]) -> String {
    let cols: Vec<Vec<String>> = cols.iter().map(|c| c.iter().map(|s| py_strip(s).to_string()).collect()).collect();
    let widths: Vec<usize> = headers
        .iter()
        .zip(&cols)
        .map(|(h, c)| c.iter().flat_map(|s| lines(s)).map(width).max().unwrap_or(0).max(width(h) + 2))
        .collect();
    let right = |k: usize| k == 0;
    let rule = |l: &str, fill: &str, sep: &str, r: &str| {
        let cells: Vec<String> = widths.iter().map(|&w| fill.repeat(w + 2)).collect();
        format!("{l}{}{r}", cells.join(sep))
    };
    let row = |cells: Vec<Vec<String>>| -> Vec<String> {
        let n = cells.iter().map(Vec::len).max().unwrap_or(1);
        (0..n)
            .map(|i| {
                let parts: Vec<String> = cells
                    .iter()
                    .zip(&widths)
                    .map(|(c, &w)| format!(" {} ", c.get(i).cloned().unwrap_or_else(|| " ".repeat(w))))
                    .collect();
                format!("│{}│", parts.join("│"))
            })
            .collect()
    };
    let mut out = vec![rule("╒", "═", "╤", "╕")];
    out.extend(row(headers.iter().enumerate().map(|(k, h)| vec![pad(h, widths[k], right(k))]).collect()));
    out.push(rule("╞", "═", "╪", "╡"));
    let n_rows = cols.first().map_or(0, Vec::len);
    for i in 0..n_rows {
        if i > 0 {
            out.push(rule("├", "─", "┼", "┤"));
        }
        out.extend(row(cols
            .iter()
            .enumerate()
            .map(|(k, c)| lines(&c[i]).into_iter().map(|l| pad(l, widths[k], right(k))).collect())
            .collect()));
    }
    out.push(rule("╘", "═", "╧", "╛"));
    out.join("\n")
}
