//! How the sacreBLEU 2.5.1 CLI prints scores: `Score.format`, `Signature.format`,
//! `print_single_results`, and Python's float formatting.

/// Python's `f"{x:.{prec}f}"` (both round the exact binary value half to even).
pub fn py_fixed(x: f64, prec: usize) -> String {
    format!("{x:.prec$}")
}

/// Python's `repr(float)`: the shortest round-trip digits, fixed notation for decimal exponents
/// -4..16, else scientific (`1e-05`, `1.5e+16`).
pub fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    let sci = format!("{:e}", x.abs());
    let (mant, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if x < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let body = if exp < 0 {
            format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
        } else if exp + 1 >= n {
            format!("{}{}.0", digits, "0".repeat((exp + 1 - n) as usize))
        } else {
            format!("{}.{}", &digits[..(exp + 1) as usize], &digits[(exp + 1) as usize..])
        };
        format!("{sign}{body}")
    } else {
        let m = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        let es = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{es}{:02}", exp.abs())
    }
}

/// `json.dumps` of a string with `ensure_ascii=False`.
pub fn json_str(s: &str) -> String {
    json_dumps_str(s, false)
}

/// `json.dumps` of a string: with `ensure_ascii`, every character outside printable ASCII as
/// `\uXXXX` (UTF-16 units); without, only the control characters.
pub fn json_dumps_str(s: &str, ensure_ascii: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && (c as u32) > 0x7e) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A metric's reproducibility signature (`Signature.info` without the unset fields).
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    /// (name, short name, value), in order, `version` excluded.
    pub fields: Vec<(String, String, String)>,
    pub version: String,
}

impl Signature {
    /// A signature with `nrefs` first.
    pub fn new(num_refs: usize, version: &str) -> Self {
        Self { fields: vec![("nrefs".into(), "#".into(), num_refs.to_string())], version: version.into() }
    }

    pub fn push(&mut self, name: &str, short: &str, value: &str) {
        self.fields.push((name.into(), short.into(), value.into()));
    }

    /// The fields resampling adds after `nrefs`: `bs` (resamples), `ar` (trials), `seed`.
    pub fn set_resampling(&mut self, bs: Option<usize>, ar: Option<usize>, seed: &str) {
        let mut fields = vec![];
        if let Some(n) = bs {
            fields.push(("bs".to_string(), "bs".to_string(), n.to_string()));
        }
        if let Some(n) = ar {
            fields.push(("ar".to_string(), "ar".to_string(), n.to_string()));
        }
        fields.push(("seed".to_string(), "rs".to_string(), seed.to_string()));
        self.fields.splice(1..1, fields);
    }

    /// `Signature.format(short)`.
    pub fn format(&self, short: bool) -> String {
        let mut pairs: Vec<String> =
            self.fields.iter().map(|(n, s, v)| format!("{}:{}", if short { s } else { n }, v)).collect();
        pairs.push(format!("{}:{}", if short { "v" } else { "version" }, self.version));
        pairs.join("|")
    }
}

/// A score as `Score.format` sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Score {
    pub name: String,
    pub score: f64,
    /// `_verbose` (empty for chrF and TER).
    pub verbose: String,
    /// `(_mean, _ci)` from bootstrap resampling (`--confidence`); printed when `_mean > 0`.
    pub confidence: Option<(f64, f64)>,
}

impl Score {
    /// `Score.format(width, score_only, signature, is_json)`.
    pub fn format(&self, width: usize, score_only: bool, signature: &str, is_json: bool) -> String {
        let mut sc = py_fixed(self.score, width);
        let mut confidence_entries = Vec::new();
        if let Some((mean, ci)) = self.confidence.filter(|&(mean, _)| mean > 0.0) {
            let (confidence_mean, confidence_var) = (py_fixed(mean, width), py_fixed(ci, width));
            let confidence_str = format!("μ = {confidence_mean} ± {confidence_var}");
            sc = format!("{sc} ({confidence_str})");
            let repr = |s: &str| py_float_repr(s.parse().expect("a formatted float"));
            confidence_entries = vec![
                ("confidence_mean".to_string(), repr(&confidence_mean)),
                ("confidence_var".to_string(), repr(&confidence_var)),
                ("confidence".to_string(), json_str(&confidence_str)),
            ];
        }
        if score_only {
            return sc;
        }
        if is_json {
            let rounded: f64 = py_fixed(self.score, width).parse().unwrap_or(self.score);
            let mut entries: Vec<(String, String)> = vec![
                ("name".into(), json_str(&self.name)),
                ("score".into(), py_float_repr(rounded)),
                ("signature".into(), json_str(signature)),
            ];
            entries.extend(confidence_entries);
            if !self.verbose.is_empty() {
                entries.push(("verbose_score".into(), json_str(&self.verbose)));
            }
            for param in signature.split('|') {
                let (k, v) = param.split_once(':').unwrap_or((param, ""));
                match entries.iter_mut().find(|(ek, _)| ek == k) {
                    Some(e) => e.1 = json_str(v),
                    None => entries.push((k.to_string(), json_str(v))),
                }
            }
            let body: Vec<String> = entries.iter().map(|(k, v)| format!(" {}: {}", json_str(k), v)).collect();
            return format!("{{\n{}\n}}", body.join(",\n"));
        }
        let mut full = if signature.is_empty() { self.name.clone() } else { format!("{}|{}", self.name, signature) };
        full = format!("{full} = {sc}");
        if !self.verbose.is_empty() {
            full = format!("{full} {}", self.verbose);
        }
        full
    }
}

/// `print_single_results`: the whole stdout for one system's results.
pub fn print_single_results(results: &[String], json: bool) -> String {
    let mut out = String::new();
    if json {
        if results.len() > 1 {
            out.push_str(&format!("[\n{}\n]\n", results.join(",\n")));
        } else if let Some(r) = results.first() {
            out.push_str(r);
            out.push('\n');
        }
        return out;
    }
    if results.len() == 1 {
        out.push_str(&results[0]);
        out.push('\n');
        return out;
    }
    let mut lens = Vec::new();
    for line in results {
        match line.chars().position(|c| c == '=') {
            Some(p) => lens.push(p as i64 - 1),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    if let Some(&w) = lens.iter().max() {
        for (&len, line) in lens.iter().zip(results) {
            let chars: Vec<char> = line.chars().collect();
            // Python slices with a negative index count from the end
            let cut = if len < 0 { (chars.len() as i64 + len).max(0) as usize } else { (len as usize).min(chars.len()) };
            let left: String = chars[..cut].iter().collect();
            let right: String = chars[cut..].iter().collect();
            let pad = (w.max(0) as usize).saturating_sub(left.chars().count());
            out.push_str(&format!("{}{}{}\n", " ".repeat(pad), left, right));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr() {
        assert_eq!(py_float_repr(0.0), "0.0");
        assert_eq!(py_float_repr(100.0), "100.0");
        assert_eq!(py_float_repr(12.3), "12.3");
        assert_eq!(py_float_repr(0.00001), "1e-05");
        assert_eq!(py_float_repr(0.0001), "0.0001");
        assert_eq!(py_float_repr(1e16), "1e+16");
        assert_eq!(py_float_repr(1.5e16), "1.5e+16");
        assert_eq!(py_float_repr(123456.0), "123456.0");
    }

    #[test]
    fn fixed_rounds_half_even() {
        assert_eq!(py_fixed(0.125, 2), "0.12");
        assert_eq!(py_fixed(0.375, 2), "0.38");
        assert_eq!(py_fixed(2.5, 0), "2");
    }
}
