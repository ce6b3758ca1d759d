//! A pickle reader (protocols 0-5) that builds a value tree and never executes anything.
//!
//! Containers live in an arena ([`Pickle::nodes`]) and values refer to them by index, so memo
//! aliasing is exact (a dict memoised while empty and filled later by `SETITEMS` is the same
//! node everywhere), reference cycles (omegaconf's `_parent`) cost nothing and dropping a deeply
//! nested tree never recurses. Globals are never imported: a short allow-list
//! (`torch._utils` rebuild functions, storage classes, `OrderedDict`, `torch.Size`,
//! `_codecs.encode`, `set`/`frozenset`/`bytearray`) is interpreted, every other callable becomes
//! an opaque [`Node::Object`] that keeps its class name, arguments and `BUILD` state.
//!
//! This module depends on std only (plus `thiserror`), so it can be fuzzed without libtorch.

use std::collections::HashMap;
use std::rc::Rc;

/// Largest memo index accepted (`LONG_BINPUT` takes a u32; the memo is a hash map, so this only
/// bounds the number of entries, not an allocation).
const MAX_MEMO_ENTRIES: usize = 1 << 24;
/// Largest VM stack. Every push costs at least one opcode byte, so only a pickle of many MiB of
/// `DUP`/`BINGET` opcodes gets here; it bounds the stack's memory.
const MAX_STACK: usize = 1 << 24;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PickleError {
    #[error("pickle data truncated at byte {offset}")]
    Truncated { offset: usize },
    #[error("unknown pickle opcode 0x{opcode:02x} at byte {offset}")]
    UnknownOpcode { opcode: u8, offset: usize },
    #[error("{what} (pickle opcode at byte {offset})")]
    Malformed { offset: usize, what: String },
    #[error("pickle stack exceeds {MAX_STACK} entries at byte {offset}")]
    StackTooLarge { offset: usize },
}

/// Index of a node in [`Pickle::nodes`].
pub type NodeId = usize;

/// A pickled value. Scalars are inline; containers and objects are arena nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Value {
    #[default]
    None,
    Bool(bool),
    Int(i64),
    /// An integer too large for i64, little-endian two's complement (as `LONG1`/`LONG4` store it).
    BigInt(Rc<[u8]>),
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    /// `module.name` pushed by `GLOBAL`/`STACK_GLOBAL` and not (yet) called.
    Global(Rc<str>),
    Node(NodeId),
}

/// torch storage element types (`torch.<Name>Storage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StorageDtype {
    Float32,
    Float16,
    BFloat16,
    Float64,
    Int64,
    Int32,
    Int16,
    Int8,
    UInt8,
    Bool,
}

impl StorageDtype {
    /// Parses a storage class name such as `torch.FloatStorage` or `torch.cuda.HalfStorage`.
    pub fn from_storage_class(class: &str) -> Option<Self> {
        let name = class.strip_prefix("torch.cuda.").or_else(|| class.strip_prefix("torch."))?;
        Some(match name {
            "FloatStorage" => Self::Float32,
            "HalfStorage" => Self::Float16,
            "BFloat16Storage" => Self::BFloat16,
            "DoubleStorage" => Self::Float64,
            "LongStorage" => Self::Int64,
            "IntStorage" => Self::Int32,
            "ShortStorage" => Self::Int16,
            "CharStorage" => Self::Int8,
            "ByteStorage" => Self::UInt8,
            "BoolStorage" => Self::Bool,
            _ => return None,
        })
    }

    /// Parses a safetensors dtype tag.
    pub fn from_safetensors(tag: &str) -> Option<Self> {
        Some(match tag {
            "F32" => Self::Float32,
            "F16" => Self::Float16,
            "BF16" => Self::BFloat16,
            "F64" => Self::Float64,
            "I64" => Self::Int64,
            "I32" => Self::Int32,
            "I16" => Self::Int16,
            "I8" => Self::Int8,
            "U8" => Self::UInt8,
            "BOOL" => Self::Bool,
            _ => return None,
        })
    }

    pub fn element_size(self) -> usize {
        match self {
            Self::Float64 | Self::Int64 => 8,
            Self::Float32 | Self::Int32 => 4,
            Self::Float16 | Self::BFloat16 | Self::Int16 => 2,
            Self::Int8 | Self::UInt8 | Self::Bool => 1,
        }
    }

    /// torch's name for the dtype (`float32`, `float16`, ...), as `str(tensor.dtype)` minus `torch.`.
    pub fn torch_name(self) -> &'static str {
        match self {
            Self::Float32 => "float32",
            Self::Float16 => "float16",
            Self::BFloat16 => "bfloat16",
            Self::Float64 => "float64",
            Self::Int64 => "int64",
            Self::Int32 => "int32",
            Self::Int16 => "int16",
            Self::Int8 => "int8",
            Self::UInt8 => "uint8",
            Self::Bool => "bool",
        }
    }
}

/// A storage named by a torch persistent id.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageRef {
    pub key: String,
    pub dtype: StorageDtype,
    pub location: String,
    /// Declared number of elements.
    pub numel: u64,
}

/// A tensor rebuilt by `torch._utils._rebuild_tensor[_v2]`: a strided view of a storage.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorRef {
    /// Node id of the [`Node::Storage`].
    pub storage: NodeId,
    pub storage_offset: i64,
    pub size: Vec<i64>,
    pub stride: Vec<i64>,
}

/// Ordered dict with any keys; string and int keys are indexed for `SETITEM` replacement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dict {
    pub entries: Vec<(Value, Value)>,
    index: HashMap<HashKey, usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum HashKey {
    Str(Rc<str>),
    Int(i64),
}

impl HashKey {
    fn of(v: &Value) -> Option<Self> {
        match v {
            Value::Str(s) => Some(Self::Str(s.clone())),
            Value::Int(i) => Some(Self::Int(*i)),
            Value::Bool(b) => Some(Self::Int(i64::from(*b))),
            _ => None,
        }
    }
}

impl Dict {
    pub fn insert(&mut self, key: Value, value: Value) {
        match HashKey::of(&key) {
            Some(h) => match self.index.get(&h) {
                Some(&i) => self.entries[i].1 = value,
                None => {
                    self.index.insert(h, self.entries.len());
                    self.entries.push((key, value));
                }
            },
            None => self.entries.push((key, value)),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        let i = *self.index.get(&HashKey::Str(Rc::from(key)))?;
        Some(&self.entries[i].1)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// An arena node.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Dict),
    Set(Vec<Value>),
    /// An instance of a class outside the allow-list (or `argparse.Namespace`, omegaconf
    /// containers...): never constructed, only described.
    Object { class: String, args: Vec<Value>, state: Option<Value> },
    Storage(StorageRef),
    Tensor(TensorRef),
}

/// A parsed pickle: the arena and the root value.
#[derive(Debug, Default)]
pub struct Pickle {
    pub nodes: Vec<Node>,
    pub root: Value,
    /// Storages by key, so that tensors sharing a storage (tied embeddings) share one node.
    pub storages: HashMap<String, NodeId>,
}

impl Pickle {
    pub fn node(&self, v: &Value) -> Option<&Node> {
        match v {
            Value::Node(id) => self.nodes.get(*id),
            _ => None,
        }
    }

    /// The dict behind `v`, if it is one.
    pub fn dict(&self, v: &Value) -> Option<&Dict> {
        match self.node(v)? {
            Node::Dict(d) => Some(d),
            _ => None,
        }
    }

    /// A short description of a value for error messages (`str`, `dict`, `argparse.Namespace`...).
    pub fn type_name(&self, v: &Value) -> String {
        match v {
            Value::None => "None".into(),
            Value::Bool(_) => "bool".into(),
            Value::Int(_) | Value::BigInt(_) => "int".into(),
            Value::Float(_) => "float".into(),
            Value::Str(_) => "str".into(),
            Value::Bytes(_) => "bytes".into(),
            Value::Global(g) => format!("global {g}"),
            Value::Node(id) => match self.nodes.get(*id) {
                Some(Node::List(_)) => "list".into(),
                Some(Node::Tuple(_)) => "tuple".into(),
                Some(Node::Dict(_)) => "dict".into(),
                Some(Node::Set(_)) => "set".into(),
                Some(Node::Object { class, .. }) => class.clone(),
                Some(Node::Storage(_)) => "storage".into(),
                Some(Node::Tensor(_)) => "tensor".into(),
                None => "?".into(),
            },
        }
    }
}

/// Reads one pickle from the start of `data`. Returns the parsed pickle and the number of bytes
/// consumed (up to and including `STOP`), so that legacy torch files (several pickles in a row)
/// can be read in sequence. `base_offset` is added to byte offsets in error messages.
pub fn parse(data: &[u8], base_offset: usize) -> Result<(Pickle, usize), PickleError> {
    let mut vm = Vm { data, pos: 0, base: base_offset, stack: Vec::new(), marks: Vec::new(), memo: HashMap::new(), out: Pickle::default() };
    let root = vm.run()?;
    vm.out.root = root;
    Ok((vm.out, vm.pos))
}

struct Vm<'a> {
    data: &'a [u8],
    pos: usize,
    base: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
    out: Pickle,
}

impl Vm<'_> {
    fn offset(&self) -> usize {
        self.base + self.pos
    }

    fn err(&self, at: usize, what: impl Into<String>) -> PickleError {
        PickleError::Malformed { offset: self.base + at, what: what.into() }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], PickleError> {
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

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, PickleError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, PickleError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, PickleError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn len_u64(&mut self, at: usize) -> Result<usize, PickleError> {
        let n = self.u64()?;
        usize::try_from(n).map_err(|_| self.err(at, format!("declared length {n} too large")))
    }

    /// A text line ending in `\n` (protocol 0 arguments), without the newline.
    fn line(&mut self) -> Result<&[u8], PickleError> {
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

    fn push(&mut self, v: Value) -> Result<(), PickleError> {
        if self.stack.len() >= MAX_STACK {
            return Err(PickleError::StackTooLarge { offset: self.offset() });
        }
        self.stack.push(v);
        Ok(())
    }

    fn pop(&mut self, at: usize) -> Result<Value, PickleError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(self.err(at, "stack underflow (popped past MARK)"));
        }
        self.stack.pop().ok_or_else(|| self.err(at, "stack underflow"))
    }

    fn top(&self, at: usize) -> Result<&Value, PickleError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(self.err(at, "stack underflow (read past MARK)"));
        }
        self.stack.last().ok_or_else(|| self.err(at, "stack underflow"))
    }

    fn pop_mark(&mut self, at: usize) -> Result<Vec<Value>, PickleError> {
        let m = self.marks.pop().ok_or_else(|| self.err(at, "MARK expected"))?;
        Ok(self.stack.split_off(m.min(self.stack.len())))
    }

    fn new_node(&mut self, n: Node) -> Value {
        self.out.nodes.push(n);
        Value::Node(self.out.nodes.len() - 1)
    }

    fn memo_put(&mut self, at: usize, idx: u32) -> Result<(), PickleError> {
        if self.memo.len() >= MAX_MEMO_ENTRIES && !self.memo.contains_key(&idx) {
            return Err(self.err(at, format!("more than {MAX_MEMO_ENTRIES} memo entries")));
        }
        let v = self.top(at)?.clone();
        self.memo.insert(idx, v);
        Ok(())
    }

    fn memo_get(&mut self, at: usize, idx: u32) -> Result<(), PickleError> {
        let v = self.memo.get(&idx).cloned().ok_or_else(|| self.err(at, format!("memo key {idx} not found")))?;
        self.push(v)
    }

    fn str_value(&self, at: usize, bytes: &[u8]) -> Result<Value, PickleError> {
        let s = std::str::from_utf8(bytes).map_err(|_| self.err(at, "string is not valid UTF-8"))?;
        Ok(Value::Str(Rc::from(s)))
    }

    fn run(&mut self) -> Result<Value, PickleError> {
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
                            Value::BigInt(Rc::from(t.as_bytes()))
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
                    self.push(Value::Global(Rc::from(format!("{module}.{name}").as_str())))?;
                }
                0x93 => {
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    match (module, name) {
                        (Value::Str(m), Value::Str(n)) => self.push(Value::Global(Rc::from(format!("{m}.{n}").as_str())))?,
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
                    self.push(v)?;
                }
                0x92 => {
                    let _kwargs = self.pop(at)?;
                    let args = self.pop(at)?;
                    let cls = self.pop(at)?;
                    let args = self.tuple_items(at, &args)?;
                    let v = self.call(at, &cls, args)?;
                    self.push(v)?;
                }
                b'o' => {
                    let mut items = self.pop_mark(at)?;
                    if items.is_empty() {
                        return Err(self.err(at, "OBJ without a class"));
                    }
                    let cls = items.remove(0);
                    let v = self.call(at, &cls, items)?;
                    self.push(v)?;
                }
                b'i' => {
                    let module = String::from_utf8_lossy(self.line()?).into_owned();
                    let name = String::from_utf8_lossy(self.line()?).into_owned();
                    let items = self.pop_mark(at)?;
                    let cls = Value::Global(Rc::from(format!("{module}.{name}").as_str()));
                    let v = self.call(at, &cls, items)?;
                    self.push(v)?;
                }
                b'b' => {
                    let state = self.pop(at)?;
                    let target = self.top(at)?.clone();
                    if let Some(Node::Object { state: s, .. }) = self.node_mut(&target) {
                        *s = Some(state);
                    }
                    // BUILD on an OrderedDict (module `_metadata`) or a tensor (Python-side
                    // attributes) carries nothing a state dict needs.
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

    fn node_mut(&mut self, v: &Value) -> Option<&mut Node> {
        match v {
            Value::Node(id) => self.out.nodes.get_mut(*id),
            _ => None,
        }
    }

    fn tuple_items(&self, at: usize, v: &Value) -> Result<Vec<Value>, PickleError> {
        match self.out.node(v) {
            Some(Node::Tuple(items)) | Some(Node::List(items)) => Ok(items.clone()),
            _ => Err(self.err(at, format!("call arguments must be a tuple, got {}", self.out.type_name(v)))),
        }
    }

    fn extend_list(&mut self, at: usize, target: &Value, items: Vec<Value>) -> Result<(), PickleError> {
        match self.node_mut(target) {
            Some(Node::List(l)) => {
                l.extend(items);
                Ok(())
            }
            // `list` subclasses rebuilt as opaque objects (e.g. omegaconf internals): keep the items.
            Some(Node::Object { args, .. }) => {
                args.extend(items);
                Ok(())
            }
            _ => Err(self.err(at, "APPEND target is not a list")),
        }
    }

    fn fill_dict(&self, at: usize, d: &mut Dict, items: Vec<Value>) -> Result<(), PickleError> {
        if items.len() % 2 != 0 {
            return Err(self.err(at, "odd number of items for a dict"));
        }
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            d.insert(k, v);
        }
        Ok(())
    }

    fn setitems(&mut self, at: usize, target: &Value, items: Vec<Value>) -> Result<(), PickleError> {
        if items.len() % 2 != 0 {
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
            Some(Node::Object { .. }) => {
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

    fn int_arg(&self, at: usize, v: &Value, what: &str) -> Result<i64, PickleError> {
        match v {
            Value::Int(i) => Ok(*i),
            Value::Bool(b) => Ok(i64::from(*b)),
            _ => Err(self.err(at, format!("{what} must be an int, got {}", self.out.type_name(v)))),
        }
    }

    fn int_tuple(&self, at: usize, v: &Value, what: &str) -> Result<Vec<i64>, PickleError> {
        let items = self.tuple_items(at, v).map_err(|_| self.err(at, format!("{what} must be a tuple")))?;
        items.iter().map(|x| self.int_arg(at, x, what)).collect()
    }

    /// `REDUCE`/`NEWOBJ`/`OBJ`/`INST`: interprets allow-listed callables, describes the rest.
    fn call(&mut self, at: usize, callable: &Value, args: Vec<Value>) -> Result<Value, PickleError> {
        let name: Rc<str> = match callable {
            Value::Global(g) => g.clone(),
            other => {
                // Calling the result of a call (e.g. `_rebuild_from_type_v2`'s func) is never needed.
                return Err(self.err(at, format!("cannot call a {}", self.out.type_name(other))));
            }
        };
        match &*name {
            "collections.OrderedDict" | "collections.defaultdict" | "builtins.dict" | "__builtin__.dict" => {
                let mut d = Dict::default();
                if name.as_ref() != "collections.defaultdict" {
                    if let Some(first) = args.first() {
                        if let Some(Node::List(pairs)) | Some(Node::Tuple(pairs)) = self.out.node(first) {
                            for p in pairs.clone() {
                                match self.out.node(&p) {
                                    Some(Node::Tuple(kv)) | Some(Node::List(kv)) if kv.len() == 2 => d.insert(kv[0].clone(), kv[1].clone()),
                                    _ => return Err(self.err(at, "OrderedDict argument is not a list of pairs")),
                                }
                            }
                        }
                    }
                }
                Ok(self.new_node(Node::Dict(d)))
            }
            "torch._utils._rebuild_tensor" | "torch._utils._rebuild_tensor_v2" => {
                if args.len() < 4 {
                    return Err(self.err(at, format!("{name} needs at least 4 arguments, got {}", args.len())));
                }
                let storage = match self.out.node(&args[0]) {
                    Some(Node::Storage(_)) => match &args[0] {
                        Value::Node(id) => *id,
                        _ => unreachable_storage(),
                    },
                    _ => return Err(self.err(at, format!("{name}: first argument is a {}, not a storage", self.out.type_name(&args[0])))),
                };
                let storage_offset = self.int_arg(at, &args[1], "storage offset")?;
                let size = self.int_tuple(at, &args[2], "tensor size")?;
                let stride = self.int_tuple(at, &args[3], "tensor stride")?;
                if size.len() != stride.len() {
                    return Err(self.err(at, format!("tensor size {size:?} and stride {stride:?} differ in rank")));
                }
                Ok(self.new_node(Node::Tensor(TensorRef { storage, storage_offset, size, stride })))
            }
            "torch._utils._rebuild_parameter" | "torch._utils._rebuild_parameter_with_state" => {
                args.into_iter().next().ok_or_else(|| self.err(at, format!("{name} without arguments")))
            }
            "torch._tensor._rebuild_from_type_v2" => {
                // (func, new_type, args, state): a tensor subclass; rebuild the plain tensor.
                if args.len() < 3 {
                    return Err(self.err(at, "_rebuild_from_type_v2 needs 3 arguments"));
                }
                let inner = self.tuple_items(at, &args[2])?;
                self.call(at, &args[0], inner)
            }
            "torch.Size" => {
                let items = match args.first() {
                    Some(v) => self.tuple_items(at, v)?,
                    None => Vec::new(),
                };
                Ok(self.new_node(Node::Tuple(items)))
            }
            "_codecs.encode" => {
                let (Some(Value::Str(s)), enc) = (args.first(), args.get(1)) else {
                    return Err(self.err(at, "_codecs.encode needs a str"));
                };
                let latin1 = match enc {
                    Some(Value::Str(e)) => matches!(&**e, "latin1" | "latin-1" | "iso-8859-1"),
                    _ => false,
                };
                let bytes: Vec<u8> = if latin1 {
                    s.chars().map(|c| u8::try_from(u32::from(c))).collect::<Result<_, _>>().map_err(|_| self.err(at, "latin1 text with a character above U+00FF"))?
                } else {
                    s.as_bytes().to_vec()
                };
                Ok(Value::Bytes(Rc::from(bytes)))
            }
            "builtins.set" | "builtins.frozenset" | "__builtin__.set" | "__builtin__.frozenset" => {
                let items = match args.first() {
                    Some(v) => match self.out.node(v) {
                        Some(Node::List(l)) | Some(Node::Tuple(l)) | Some(Node::Set(l)) => l.clone(),
                        _ => return Err(self.err(at, "set() argument is not a sequence")),
                    },
                    None => Vec::new(),
                };
                Ok(self.new_node(Node::Set(items)))
            }
            "builtins.bytearray" | "__builtin__.bytearray" => match args.first() {
                None => Ok(Value::Bytes(Rc::from(&[][..]))),
                Some(Value::Bytes(b)) => Ok(Value::Bytes(b.clone())),
                Some(other) => Err(self.err(at, format!("bytearray() of a {}", self.out.type_name(other)))),
            },
            _ => Ok(self.new_node(Node::Object { class: name.to_string(), args, state: None })),
        }
    }

    /// torch persistent ids: `('storage', <storage class>, key, location, numel[, view_metadata])`.
    fn persistent_load(&mut self, at: usize, pid: Value) -> Result<Value, PickleError> {
        let items = match self.out.node(&pid) {
            Some(Node::Tuple(items)) => items.clone(),
            _ => return Err(self.err(at, format!("persistent id is a {}, not a tuple", self.out.type_name(&pid)))),
        };
        match items.first() {
            Some(Value::Str(s)) if &**s == "storage" => {}
            Some(Value::Str(s)) => return Err(self.err(at, format!("unsupported persistent id type {s:?}"))),
            _ => return Err(self.err(at, "persistent id without a type tag")),
        }
        if items.len() < 5 {
            return Err(self.err(at, format!("storage persistent id has {} fields, expected 5 or 6", items.len())));
        }
        let class = match &items[1] {
            Value::Global(g) => g.to_string(),
            other => return Err(self.err(at, format!("storage type is a {}", self.out.type_name(other)))),
        };
        let dtype = StorageDtype::from_storage_class(&class).ok_or_else(|| self.err(at, format!("unsupported storage type {class}")))?;
        let key = match &items[2] {
            Value::Str(s) => s.to_string(),
            Value::Int(i) => i.to_string(),
            other => return Err(self.err(at, format!("storage key is a {}", self.out.type_name(other)))),
        };
        let location = match &items[3] {
            Value::Str(s) => s.to_string(),
            _ => String::new(),
        };
        let numel = match &items[4] {
            Value::Int(n) if *n >= 0 => *n as u64,
            other => return Err(self.err(at, format!("storage size is not a non-negative int: {}", self.out.type_name(other)))),
        };
        if items.get(5).is_some_and(|v| *v != Value::None) {
            return Err(self.err(at, "storage views (legacy view_metadata) are not supported"));
        }
        if let Some(&id) = self.out.storages.get(&key) {
            match &self.out.nodes[id] {
                Node::Storage(s) if s.dtype == dtype && s.numel == numel => return Ok(Value::Node(id)),
                _ => return Err(self.err(at, format!("storage {key:?} declared twice with different types or sizes"))),
            }
        }
        let v = self.new_node(Node::Storage(StorageRef { key: key.clone(), dtype, location, numel }));
        if let Value::Node(id) = v {
            self.out.storages.insert(key, id);
        }
        Ok(v)
    }
}

#[allow(clippy::missing_const_for_fn)]
fn unreachable_storage() -> NodeId {
    // `Pickle::node` only returns Some for `Value::Node`.
    usize::MAX
}

fn parse_memo_index(line: &[u8]) -> Option<u32> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

/// `LONG1`/`LONG4` payload: little-endian two's complement.
fn long_from_le(b: &[u8]) -> Value {
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
fn bytes_or_str(b: Vec<u8>) -> Value {
    match String::from_utf8(b) {
        Ok(s) => Value::Str(Rc::from(s.as_str())),
        Err(e) => Value::Bytes(Rc::from(e.into_bytes())),
    }
}

/// `STRING` argument: a Python repr in single or double quotes with backslash escapes.
fn unquote_py_string(line: &[u8]) -> Option<Vec<u8>> {
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
fn unescape_raw_unicode(line: &[u8]) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn p(bytes: &[u8]) -> Pickle {
        parse(bytes, 0).unwrap().0
    }

    #[test]
    fn memo_aliases_a_dict_filled_after_memoisation() {
        // d = {} memoised, appended to a list, and only then filled through BINGET + SETITEM;
        // the list must see the filled dict.
        let bytes = b"\x80\x02}q\x00]q\x01h\x00ah\x00X\x01\x00\x00\x00aK\x01s\x86.";
        let pk = p(bytes);
        let Some(Node::Tuple(items)) = pk.node(&pk.root) else { panic!("not a tuple") };
        let Some(Node::List(l)) = pk.node(&items[0]) else { panic!("not a list") };
        assert_eq!(l[0], items[1]);
        assert_eq!(pk.dict(&items[1]).unwrap().get("a"), Some(&Value::Int(1)));
    }

    #[test]
    fn long1_decodes_the_legacy_magic_number() {
        // pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2)
        let bytes = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.";
        let pk = p(bytes);
        assert_eq!(pk.root, Value::BigInt(Rc::from(&b"l\xfc\x9cF\xf9 j\xa8P\x19"[..])));
        assert_eq!(p(b"\x80\x02\x8a\x02\xff\xfe.").root, Value::Int(-257));
    }

    #[test]
    fn unknown_globals_are_described_not_called() {
        // os.system('x') via REDUCE
        let pk = p(b"cos\nsystem\nX\x01\x00\x00\x00x\x85R.");
        let Some(Node::Object { class, args, .. }) = pk.node(&pk.root) else { panic!() };
        assert_eq!(class, "os.system");
        assert_eq!(args[0], Value::Str(Rc::from("x")));
    }

    #[test]
    fn protocol_0_text_opcodes() {
        // pickle.dumps({'a': [1, 2.5, u'\xe9', 'b']}, protocol=0)
        let pk = p(b"(dp0\nVa\np1\n(lp2\nI1\naF2.5\naV\\u00e9\np3\naVb\np4\nas.");
        let d = pk.dict(&pk.root).unwrap();
        let Some(Node::List(l)) = pk.node(d.get("a").unwrap()) else { panic!() };
        assert_eq!(l[0], Value::Int(1));
        assert_eq!(l[1], Value::Float(2.5));
        assert_eq!(l[2], Value::Str(Rc::from("\u{e9}")));
    }

    #[test]
    fn malformed_inputs_are_errors_with_offsets() {
        assert!(matches!(parse(b"\x80\x02]", 0), Err(PickleError::Truncated { .. })));
        assert!(matches!(parse(b"\x80\x02\xff", 10), Err(PickleError::UnknownOpcode { opcode: 0xff, offset: 12 })));
        assert!(parse(b"h\x05.", 0).is_err());
        assert!(parse(b"a.", 0).is_err());
        assert!(parse(b"X\xff\xff\xff\xff", 0).is_err());
        assert!(parse(b"(0.", 0).is_err());
    }
}
