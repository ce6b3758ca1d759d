//! The pickle virtual machine: opcodes, stack, marks and memo. What a call means (torch's
//! rebuild functions, storages) is in [`super::torch`]; protocol-0 text arguments in
//! [`super::literals`].

use std::collections::HashMap;
use std::rc::Rc;

use super::literals::{bytes_or_str, decimal_to_le, long_from_le, parse_memo_index, unescape_raw_unicode, unquote_py_string};
use super::*;

pub(super) struct Vm<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
    pub(super) base: usize,
    pub(super) stack: Vec<Value>,
    pub(super) marks: Vec<usize>,
    pub(super) memo: HashMap<u32, Value>,
    pub(super) out: Pickle,
}

impl Vm<'_> {
    pub(super) fn offset(&self) -> usize {
        self.base + self.pos
    }

    pub(super) fn err(&self, at: usize, what: impl Into<String>) -> PickleError {
        PickleError::Malformed { offset: self.base + at, what: what.into() }
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&[u8], PickleError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(end) => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(PickleError::Truncated { offset: self.base + self.data.len() }),
        }
    }

    pub(super) fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16, PickleError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub(super) fn u32(&mut self) -> Result<u32, PickleError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(super) fn u64(&mut self) -> Result<u64, PickleError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub(super) fn len_u64(&mut self, at: usize) -> Result<usize, PickleError> {
        let n = self.u64()?;
        usize::try_from(n).map_err(|_| self.err(at, format!("declared length {n} too large")))
    }

    /// A text line ending in `\n` (protocol 0 arguments), without the newline.
    pub(super) fn line(&mut self) -> Result<&[u8], PickleError> {
        let rest = &self.data[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let s = &self.data[self.pos..self.pos + i];
                self.pos += i + 1;
                Ok(s)
            }
            None => Err(PickleError::Truncated { offset: self.base + self.data.len() }),
        }
    }

    pub(super) fn push(&mut self, v: Value) -> Result<(), PickleError> {
        if self.stack.len() >= MAX_STACK {
            return Err(PickleError::StackTooLarge { offset: self.offset() });
        }
        self.stack.push(v);
        Ok(())
    }

    pub(super) fn pop(&mut self, at: usize) -> Result<Value, PickleError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(self.err(at, "stack underflow (popped past MARK)"));
        }
        self.stack.pop().ok_or_else(|| self.err(at, "stack underflow"))
    }

    pub(super) fn top(&self, at: usize) -> Result<&Value, PickleError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(self.err(at, "stack underflow (read past MARK)"));
        }
        self.stack.last().ok_or_else(|| self.err(at, "stack underflow"))
    }

    pub(super) fn pop_mark(&mut self, at: usize) -> Result<Vec<Value>, PickleError> {
        let m = self.marks.pop().ok_or_else(|| self.err(at, "MARK expected"))?;
        Ok(self.stack.split_off(m.min(self.stack.len())))
    }

    pub(super) fn new_node(&mut self, n: Node) -> Value {
        self.out.nodes.push(n);
        Value::Node(self.out.nodes.len() - 1)
    }

    pub(super) fn memo_put(&mut self, at: usize, idx: u32) -> Result<(), PickleError> {
        if self.memo.len() >= MAX_MEMO_ENTRIES && !self.memo.contains_key(&idx) {
            return Err(self.err(at, format!("more than {MAX_MEMO_ENTRIES} memo entries")));
        }
        let v = self.top(at)?.clone();
        self.memo.insert(idx, v);
        Ok(())
    }

    pub(super) fn memo_get(&mut self, at: usize, idx: u32) -> Result<(), PickleError> {
        let v = self.memo.get(&idx).cloned().ok_or_else(|| self.err(at, format!("memo key {idx} not found")))?;
        self.push(v)
    }

    pub(super) fn str_value(&self, at: usize, bytes: &[u8]) -> Result<Value, PickleError> {
        let s = std::str::from_utf8(bytes).map_err(|_| self.err(at, "string is not valid UTF-8"))?;
        Ok(Value::Str(Rc::from(s)))
    }

    pub(super) fn run(&mut self) -> Result<Value, PickleError> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            match op {
                b'.' => {
                    // STOP
                    let v = self.pop(at)?;
                    return Ok(v);
                }
                0x80 => {
                    // PROTO
                    let p = self.u8()?;
                    if p > 5 {
                        return Err(self.err(at, format!("unsupported pickle protocol {p}")));
                    }
                }
                0x95 => {
                    // FRAME: the length is informational for a reader holding all the bytes.
                    self.u64()?;
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop(at)?;
                }
                b'1' => {
                    self.pop_mark(at)?;
                }
                b'2' => {
                    let v = self.top(at)?.clone();
                    self.push(v)?;
                }
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b'J' => {
                    let b = self.take(4)?;
                    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'M' => {
                    let v = self.u16()?;
                    self.push(Value::Int(i64::from(v)))?;
                }
                0x8a => {
                    let n = usize::from(self.u8()?);
                    let b = self.take(n)?.to_vec();
                    self.push(long_from_le(&b))?;
                }
                0x8b => {
                    let n = self.u32()? as usize;
                    let b = self.take(n)?.to_vec();
                    self.push(long_from_le(&b))?;
                }
                b'I' => {
                    let line = self.line()?.to_vec();
                    let s = String::from_utf8_lossy(&line);
                    let v = match s.trim() {
                        "01" => Value::Bool(true),
                        "00" => Value::Bool(false),
                        t => Value::Int(t.parse().map_err(|_| self.err(at, format!("bad INT literal {t:?}")))?),
                    };
                    self.push(v)?;
                }
                b'L' => {
                    let line = self.line()?.to_vec();
                    let s = String::from_utf8_lossy(&line);
                    let t = s.trim().trim_end_matches('L');
                    let v = match t.parse::<i64>() {
                        Ok(i) => Value::Int(i),
                        Err(_) => {
                            if t.is_empty() || !t.trim_start_matches('-').bytes().all(|c| c.is_ascii_digit()) {
                                return Err(self.err(at, format!("bad LONG literal {t:?}")));
                            }
                            Value::BigInt(Rc::from(decimal_to_le(t)))
                        }
                    };
                    self.push(v)?;
                }
                b'G' => {
                    let b = self.take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.push(Value::Float(f64::from_be_bytes(a)))?;
                }
                b'F' => {
                    let line = self.line()?.to_vec();
                    let s = String::from_utf8_lossy(&line);
                    let v: f64 = s.trim().parse().map_err(|_| self.err(at, format!("bad FLOAT literal {s:?}")))?;
                    self.push(Value::Float(v))?;
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    let b = self.take(n)?.to_vec();
                    let v = self.str_value(at, &b)?;
                    self.push(v)?;
                }
                0x8c => {
                    let n = usize::from(self.u8()?);
                    let b = self.take(n)?.to_vec();
                    let v = self.str_value(at, &b)?;
                    self.push(v)?;
                }
                0x8d => {
                    let n = self.len_u64(at)?;
                    let b = self.take(n)?.to_vec();
                    let v = self.str_value(at, &b)?;
                    self.push(v)?;
                }
                b'V' => {
                    let line = self.line()?.to_vec();
                    let s = unescape_raw_unicode(&line).ok_or_else(|| self.err(at, "bad UNICODE literal"))?;
                    self.push(Value::Str(Rc::from(s.as_str())))?;
                }
                b'S' => {
                    let line = self.line()?.to_vec();
                    let s = unquote_py_string(&line).ok_or_else(|| self.err(at, "bad STRING literal"))?;
                    self.push(bytes_or_str(s))?;
                }
                b'T' => {
                    let b = self.take(4)?;
                    let n = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    let n = usize::try_from(n).map_err(|_| self.err(at, "negative BINSTRING length"))?;
                    let b = self.take(n)?.to_vec();
                    self.push(bytes_or_str(b))?;
                }
                b'U' => {
                    let n = usize::from(self.u8()?);
                    let b = self.take(n)?.to_vec();
                    self.push(bytes_or_str(b))?;
                }
                b'B' => {
                    let n = self.u32()? as usize;
                    let b = self.take(n)?;
                    let v = Value::Bytes(Rc::from(b));
                    self.push(v)?;
                }
                b'C' => {
                    let n = usize::from(self.u8()?);
                    let b = self.take(n)?;
                    let v = Value::Bytes(Rc::from(b));
                    self.push(v)?;
                }
                0x8e | 0x96 => {
                    let n = self.len_u64(at)?;
                    let b = self.take(n)?;
                    let v = Value::Bytes(Rc::from(b));
                    self.push(v)?;
                }
                0x97 | 0x98 => return Err(self.err(at, "out-of-band pickle buffers are not supported")),
                b')' => {
                    let v = self.new_node(Node::Tuple(Vec::new()));
                    self.push(v)?;
                }
                b't' => {
                    let items = self.pop_mark(at)?;
                    let v = self.new_node(Node::Tuple(items));
                    self.push(v)?;
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop(at)?);
                    }
                    items.reverse();
                    let v = self.new_node(Node::Tuple(items));
                    self.push(v)?;
                }
                b']' => {
                    let v = self.new_node(Node::List(Vec::new()));
                    self.push(v)?;
                }
                b'l' => {
                    let items = self.pop_mark(at)?;
                    let v = self.new_node(Node::List(items));
                    self.push(v)?;
                }
                b'}' => {
                    let v = self.new_node(Node::Dict(Dict::default()));
                    self.push(v)?;
                }
                b'd' => {
                    let items = self.pop_mark(at)?;
                    let mut d = Dict::default();
                    self.fill_dict(at, &mut d, items)?;
                    let v = self.new_node(Node::Dict(d));
                    self.push(v)?;
                }
                0x8f => {
                    let v = self.new_node(Node::Set(Vec::new()));
                    self.push(v)?;
                }
                0x91 => {
                    let items = self.pop_mark(at)?;
                    let v = self.new_node(Node::Set(items));
                    self.push(v)?;
                }
                b'a' => {
                    let v = self.pop(at)?;
                    let target = self.top(at)?.clone();
                    self.extend_list(at, &target, vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark(at)?;
                    let target = self.top(at)?.clone();
                    self.extend_list(at, &target, items)?;
                }
                0x90 => {
                    let items = self.pop_mark(at)?;
                    let target = self.top(at)?.clone();
                    match self.node_mut(&target) {
                        Some(Node::Set(s)) => s.extend(items),
                        _ => return Err(self.err(at, "ADDITEMS target is not a set")),
                    }
                }
                b's' => {
                    let v = self.pop(at)?;
                    let k = self.pop(at)?;
                    let target = self.top(at)?.clone();
                    self.setitems(at, &target, vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark(at)?;
                    let target = self.top(at)?.clone();
                    self.setitems(at, &target, items)?;
                }
                b'p' => {
                    let line = self.line()?.to_vec();
                    let idx = parse_memo_index(&line).ok_or_else(|| self.err(at, "bad PUT index"))?;
                    self.memo_put(at, idx)?;
                }
                b'q' => {
                    let idx = u32::from(self.u8()?);
                    self.memo_put(at, idx)?;
                }
                b'r' => {
                    let idx = self.u32()?;
                    self.memo_put(at, idx)?;
                }
                0x94 => {
                    let idx = u32::try_from(self.memo.len()).map_err(|_| self.err(at, "memo too large"))?;
                    self.memo_put(at, idx)?;
                }
                b'g' => {
                    let line = self.line()?.to_vec();
                    let idx = parse_memo_index(&line).ok_or_else(|| self.err(at, "bad GET index"))?;
                    self.memo_get(at, idx)?;
                }
                b'h' => {
                    let idx = u32::from(self.u8()?);
                    self.memo_get(at, idx)?;
                }
                b'j' => {
                    let idx = self.u32()?;
                    self.memo_get(at, idx)?;
                }
                b'c' => {
                    let module = String::from_utf8_lossy(self.line()?).into_owned();
                    let name = String::from_utf8_lossy(self.line()?).into_owned();
                    self.note_dotted_name(&module, &name);
                    self.push(Value::Global(Rc::from(format!("{module}.{name}").as_str())))?;
                }
                0x93 => {
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    match (module, name) {
                        (Value::Str(m), Value::Str(n)) => {
                            self.note_dotted_name(&m, &n);
                            self.push(Value::Global(Rc::from(format!("{m}.{n}").as_str())))?
                        }
                        _ => return Err(self.err(at, "STACK_GLOBAL needs two strings")),
                    }
                }
                0x82..=0x84 => return Err(self.err(at, "pickle extension registry codes are not supported")),
                b'R' => {
                    let args = self.pop(at)?;
                    let callable = self.pop(at)?;
                    let args = self.tuple_items(at, &args)?;
                    let v = self.call(at, &callable, args)?;
                    self.push(v)?;
                }
                0x81 => {
                    let args = self.pop(at)?;
                    let cls = self.pop(at)?;
                    let args = self.tuple_items(at, &args)?;
                    let v = self.call(at, &cls, args)?;
                    self.mark_newobj(&v, true);
                    self.push(v)?;
                }
                0x92 => {
                    let kwargs = self.pop(at)?;
                    let args = self.pop(at)?;
                    let cls = self.pop(at)?;
                    let args = self.tuple_items(at, &args)?;
                    let v = self.call(at, &cls, args)?;
                    if self.out.dict(&kwargs).is_none_or(|d| !d.is_empty()) {
                        let class = self.out.type_name(&v);
                        self.note_lossy(|| format!("a {class} made with keyword arguments (NEWOBJ_EX)"));
                    }
                    self.mark_newobj(&v, true);
                    self.push(v)?;
                }
                b'o' => {
                    let mut items = self.pop_mark(at)?;
                    if items.is_empty() {
                        return Err(self.err(at, "OBJ without a class"));
                    }
                    let cls = items.remove(0);
                    let newobj = items.is_empty();
                    let v = self.call(at, &cls, items)?;
                    self.mark_newobj(&v, newobj);
                    self.push(v)?;
                }
                b'i' => {
                    let module = String::from_utf8_lossy(self.line()?).into_owned();
                    let name = String::from_utf8_lossy(self.line()?).into_owned();
                    let items = self.pop_mark(at)?;
                    self.note_dotted_name(&module, &name);
                    let cls = Value::Global(Rc::from(format!("{module}.{name}").as_str()));
                    let newobj = items.is_empty();
                    let v = self.call(at, &cls, items)?;
                    self.mark_newobj(&v, newobj);
                    self.push(v)?;
                }
                b'b' => {
                    let state = self.pop(at)?;
                    let target = self.top(at)?.clone();
                    match self.node_mut(&target) {
                        Some(Node::Object { state: s, .. }) => *s = Some(state),
                        // an OrderedDict's attributes (a module state dict's `_metadata`)
                        Some(Node::Dict(Dict { class: Some(class), .. })) => class.state = Some(state),
                        // a tensor's Python-side attributes: nothing a state dict needs
                        _ => {
                            let what = self.out.type_name(&target);
                            self.note_lossy(|| format!("the BUILD state of a {what}"));
                        }
                    }
                }
                b'P' => {
                    let line = self.line()?.to_vec();
                    let pid = Value::Str(Rc::from(String::from_utf8_lossy(&line).as_ref()));
                    let v = self.persistent_load(at, pid)?;
                    self.push(v)?;
                }
                b'Q' => {
                    let pid = self.pop(at)?;
                    let v = self.persistent_load(at, pid)?;
                    self.push(v)?;
                }
                _ => return Err(PickleError::UnknownOpcode { opcode: op, offset: self.base + at }),
            }
        }
    }

    /// Records the first construct that the tree keeps only in part ([`Pickle::lossy`]).
    pub(super) fn note_lossy(&mut self, what: impl FnOnce() -> String) {
        if self.out.lossy.is_none() {
            self.out.lossy = Some(what());
        }
    }

    /// A global whose name holds a dot (a nested class) is joined to its module with a dot too,
    /// so the two parts cannot be told apart again.
    fn note_dotted_name(&mut self, module: &str, name: &str) {
        if name.contains('.') {
            self.note_lossy(|| format!("the nested global {module} {name}"));
        }
    }

    fn mark_newobj(&mut self, v: &Value, newobj: bool) {
        if let Some(Node::Object { newobj: n, .. }) = self.node_mut(v) {
            *n = newobj;
        }
    }

    pub(super) fn node_mut(&mut self, v: &Value) -> Option<&mut Node> {
        match v {
            Value::Node(id) => self.out.nodes.get_mut(*id),
            _ => None,
        }
    }

    pub(super) fn tuple_items(&self, at: usize, v: &Value) -> Result<Vec<Value>, PickleError> {
        match self.out.node(v) {
            Some(Node::Tuple(items)) | Some(Node::List(items)) => Ok(items.clone()),
            _ => Err(self.err(at, format!("call arguments must be a tuple, got {}", self.out.type_name(v)))),
        }
    }

    pub(super) fn extend_list(&mut self, at: usize, target: &Value, items: Vec<Value>) -> Result<(), PickleError> {
        match self.node_mut(target) {
            Some(Node::List(l)) => {
                l.extend(items);
                Ok(())
            }
            // `list` subclasses rebuilt as opaque objects (e.g. omegaconf internals): keep the items.
            Some(Node::Object { class, args, .. }) => {
                args.extend(items);
                let what = format!("the items appended to a {class}");
                self.note_lossy(|| what);
                Ok(())
            }
            _ => Err(self.err(at, "APPEND target is not a list")),
        }
    }

    pub(super) fn fill_dict(&self, at: usize, d: &mut Dict, items: Vec<Value>) -> Result<(), PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.err(at, "odd number of items for a dict"));
        }
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            d.insert(k, v);
        }
        Ok(())
    }

    pub(super) fn setitems(&mut self, at: usize, target: &Value, items: Vec<Value>) -> Result<(), PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.err(at, "odd number of items for SETITEMS"));
        }
        match self.node_mut(target) {
            Some(Node::Dict(d)) => {
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    d.insert(k, v);
                }
                Ok(())
            }
            // dict subclasses rebuilt as opaque objects: keep the items as a state dict.
            Some(Node::Object { class, .. }) => {
                let what = format!("the items set on a {class}");
                self.note_lossy(|| what);
                let mut d = Dict::default();
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    d.insert(k, v);
                }
                let dv = self.new_node(Node::Dict(d));
                if let Some(Node::Object { state, .. }) = self.node_mut(target) {
                    if state.is_none() {
                        *state = Some(dv);
                    }
                }
                Ok(())
            }
            _ => Err(self.err(at, "SETITEM target is not a dict")),
        }
    }
}
