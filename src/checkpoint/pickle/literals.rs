//! Arguments of the protocol-0 text opcodes (`STRING`, `UNICODE`, `PUT`/`GET` indices) and
//! the byte payloads of `LONG1`/`LONG4` and the byte-string opcodes.

use std::rc::Rc;

use super::Value;

pub(super) fn parse_memo_index(line: &[u8]) -> Option<u32> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

/// `LONG1`/`LONG4` payload: little-endian two's complement.
pub(super) fn long_from_le(b: &[u8]) -> Value {
    if b.len() <= 8 {
        let neg = b.last().is_some_and(|&x| x & 0x80 != 0);
        let mut a = if neg { [0xffu8; 8] } else { [0u8; 8] };
        a[..b.len()].copy_from_slice(b);
        Value::Int(i64::from_le_bytes(a))
    } else {
        Value::BigInt(Rc::from(b))
    }
}

/// Protocol 0-2 byte strings (`STRING`, `BINSTRING`): Python 3 decodes them as text by default
/// (`encoding="ASCII"` in torch.load, latin1 fallback); keep UTF-8 text as str, the rest as bytes.
pub(super) fn bytes_or_str(b: Vec<u8>) -> Value {
    match String::from_utf8(b) {
        Ok(s) => Value::Str(Rc::from(s.as_str())),
        Err(e) => Value::Bytes(Rc::from(e.into_bytes())),
    }
}

/// `STRING` argument: a Python repr in single or double quotes with backslash escapes.
pub(super) fn unquote_py_string(line: &[u8]) -> Option<Vec<u8>> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() < 2 {
        return None;
    }
    let q = line[0];
    if (q != b'\'' && q != b'"') || line[line.len() - 1] != q {
        return None;
    }
    let body = &line[1..line.len() - 1];
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let e = *body.get(i + 1)?;
        i += 2;
        match e {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'\\' => out.push(b'\\'),
            b'\'' => out.push(b'\''),
            b'"' => out.push(b'"'),
            b'x' => {
                let h = std::str::from_utf8(body.get(i..i + 2)?).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            _ => {
                out.push(b'\\');
                out.push(e);
            }
        }
    }
    Some(out)
}

/// `UNICODE` argument: raw-unicode-escape (`\uXXXX`, `\UXXXXXXXX`, other bytes latin1).
pub(super) fn unescape_raw_unicode(line: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i] == b'\\' && matches!(line.get(i + 1), Some(b'u') | Some(b'U')) {
            let n = if line[i + 1] == b'u' { 4 } else { 8 };
            let h = std::str::from_utf8(line.get(i + 2..i + 2 + n)?).ok()?;
            out.push(char::from_u32(u32::from_str_radix(h, 16).ok()?)?);
            i += 2 + n;
        } else {
            out.push(char::from(line[i]));
            i += 1;
        }
    }
    Some(out)
}

/// A protocol-0 `LONG` literal's decimal digits (optionally `-`) as `LONG1` stores the number:
/// little-endian two's complement, in the fewest bytes that keep the sign.
pub(super) fn decimal_to_le(t: &str) -> Vec<u8> {
    let (negative, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t),
    };
    let mut magnitude: Vec<u8> = Vec::new();
    for d in digits.bytes() {
        let mut carry = u32::from(d - b'0');
        for byte in &mut magnitude {
            let v = u32::from(*byte) * 10 + carry;
            *byte = v as u8;
            carry = v >> 8;
        }
        if carry > 0 {
            magnitude.push(carry as u8);
        }
    }
    if negative {
        // two's complement: invert and add one
        let mut carry = 1u16;
        for byte in &mut magnitude {
            let v = u16::from(!*byte) + carry;
            *byte = v as u8;
            carry = v >> 8;
        }
        if magnitude.last().is_none_or(|&b| b & 0x80 == 0) {
            magnitude.push(0xff);
        }
    } else if magnitude.last().is_some_and(|&b| b & 0x80 != 0) {
        magnitude.push(0);
    }
    while magnitude.len() > 1 {
        let n = magnitude.len();
        let (last, prev) = (magnitude[n - 1], magnitude[n - 2]);
        if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
            magnitude.pop();
        } else {
            break;
        }
    }
    magnitude
}
