//! Output formatting for `tchseq translate`: fairseq-interactive's lines (with Python's float
//! formatting), JSON lines and plain text.

/// Python's `repr(float)` / `"{}".format(float)` (shortest round-trip digits; scientific
/// notation when the decimal exponent is < -4 or >= 16; `.0` on integral values).
pub fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    // Rust's `{:e}` finds the shortest round-trip length; when two strings of that length
    // round-trip, Python takes the one nearest the exact value (ties to even), which Rust's
    // exact `{:.Ne}` formatting gives.
    let shortest = format!("{:e}", x);
    let digits = shortest.split('e').next().unwrap_or("").chars().filter(char::is_ascii_digit).count();
    let nearest = format!("{:.*e}", digits.saturating_sub(1), x);
    let sci = if nearest.parse::<f64>().ok() == Some(x) { nearest } else { shortest };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    // value = 0.DIGITS * 10^decpt
    let decpt = exp + 1;
    let n = digits.len() as i32;
    let body = if decpt <= -4 || decpt > 16 {
        let mut m = digits[..1].to_string();
        if n > 1 {
            m.push('.');
            m.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
    } else if decpt <= 0 {
        format!("0.{}{}", "0".repeat((-decpt) as usize), digits)
    } else if decpt >= n {
        format!("{}{}.0", digits, "0".repeat((decpt - n) as usize))
    } else {
        format!("{}.{}", &digits[..decpt as usize], &digits[decpt as usize..])
    };
    format!("{sign}{body}")
}

/// Python's `"{:.4f}".format(x)` (correctly rounded, ties to even, `-0.0000` kept).
pub fn python_fixed4(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    format!("{:.4}", x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::excessive_precision)] // a 17-digit literal, as Python's repr reads it
    fn repr_matches_python() {
        // values and their Python 3.11 repr()
        let cases: &[(f64, &str)] = &[
            (-1.2144960165023804, "-1.2144960165023804"),
            (-13.52362060546875, "-13.52362060546875"),
            (2.0, "2.0"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (1e-4, "0.0001"),
            (1.2e-5, "1.2e-05"),
            (-3.0517578125e-05, "-3.0517578125e-05"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (12345678901234567.0, "1.2345678901234568e+16"),
            (0.5, "0.5"),
            (-123.25, "-123.25"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (f32::MIN_POSITIVE as f64, "1.1754943508222875e-38"),
            // two 17-digit strings round-trip; Python takes the nearest (tie: even)
            (-1.58295440673828125, "-1.5829544067382812"),
            (-0.0049665700644254684, "-0.0049665700644254684"),
        ];
        for &(x, want) in cases {
            assert_eq!(python_float_repr(x), want, "{x:e}");
        }
    }

    #[test]
    fn fixed4_matches_python() {
        // "{:.4f}".format(x) in Python 3.11
        let cases: &[(f64, &str)] = &[
            (-0.00001, "-0.0000"),
            (0.03125, "0.0312"),
            (0.09375, "0.0938"),
            (-1.23456789, "-1.2346"),
            (-12.0, "-12.0000"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for &(x, want) in cases {
            assert_eq!(python_fixed4(x), want, "{x:e}");
        }
    }
}
