//! The protobuf wire format of a `.model` file (`ModelProto`), read field by field.

use super::*;

pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
}

pub(super) enum Value<'a> {
    Varint(u64),
    Fixed32(u32),
    Fixed64,
    Bytes(&'a [u8]),
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(super) fn varint(&mut self) -> Result<u64, SentencePieceError> {
        let mut result = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.buf.get(self.pos).ok_or_else(|| format_err("truncated varint"))?;
            self.pos += 1;
            result |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(result);
            }
        }
        Err(format_err("varint too long"))
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], SentencePieceError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| format_err("truncated field"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    pub(super) fn next(&mut self) -> Result<Option<(u64, Value<'a>)>, SentencePieceError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Value::Fixed64
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| format_err("length overflow"))?;
                Value::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Value::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            t => return Err(format_err(format!("unsupported wire type {t}"))),
        };
        Ok(Some((key >> 3, value)))
    }
}

pub(super) fn as_str(b: &[u8], what: &str) -> Result<String, SentencePieceError> {
    String::from_utf8(b.to_vec()).map_err(|_| format_err(format!("{what} is not UTF-8")))
}

pub(super) fn parse_piece(b: &[u8]) -> Result<Piece, SentencePieceError> {
    let mut piece = Piece { piece: String::new(), score: 0.0, kind: PieceType::Normal };
    let mut r = Reader::new(b);
    while let Some((field, value)) = r.next()? {
        match (field, value) {
            (1, Value::Bytes(s)) => piece.piece = as_str(s, "a piece")?,
            (2, Value::Fixed32(bits)) => piece.score = f32::from_bits(bits),
            (3, Value::Varint(t)) => {
                piece.kind = match t {
                    1 => PieceType::Normal,
                    2 => PieceType::Unknown,
                    3 => PieceType::Control,
                    4 => PieceType::UserDefined,
                    5 => PieceType::Unused,
                    6 => PieceType::Byte,
                    other => return Err(format_err(format!("unknown piece type {other}"))),
                }
            }
            _ => {}
        }
    }
    Ok(piece)
}
