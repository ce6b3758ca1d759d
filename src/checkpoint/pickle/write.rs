//! Writes a value tree back as a pickle, as `torch.save` pickles what `torch.load` returned:
//! protocol 2, Python's own opcode choices (`BININT1`/`BININT2`/`BININT`/`LONG1`, `BINUNICODE`,
//! `EMPTY_DICT` + `SETITEMS` in batches of 1000, ...), a dict made by a class
//! (`collections.OrderedDict`) called again by `REDUCE`, an object called again by `REDUCE` or
//! made by `NEWOBJ` as it was read, and every tensor written as
//! `torch._utils._rebuild_tensor_v2` over a persistent-id storage. Storages are numbered in the
//! order the pickle first meets them, as `torch.save` numbers them, and written as CPU storages
//! (what `torch.load(map_location="cpu")` returns). A `torch.Size` is read as a tuple and written
//! as one.
//!
//! A tree that [`Pickle::lossy`] marks is refused: written back, it would not be what was read.

use std::collections::HashMap;
use std::rc::Rc;

use super::{Dict, Node, NodeId, Pickle, StorageDtype, TensorRef, Value};

/// Deepest nesting written; CPython's pickler stops at about 1000 levels too.
const MAX_DEPTH: usize = 2000;
/// Items per `APPENDS`/`SETITEMS`, as CPython batches them.
const BATCH: usize = 1000;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    #[error("cannot write back {0}: the reader keeps it only in part")]
    Lossy(String),
    #[error("the value tree is nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("a value refers to node {0}, which the tree does not have")]
    MissingNode(NodeId),
    #[error("a tensor refers to node {0}, which is not a storage")]
    NotAStorage(NodeId),
}

/// A pickle and the storages it names, in key order: the storage keyed `"i"` is `storages[i]`.
#[derive(Debug)]
pub struct Written {
    pub bytes: Vec<u8>,
    pub storages: Vec<NodeId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum MemoKey {
    Node(NodeId),
    /// A string by identity (its `Rc`), as CPython memoises by `id()`: a string the source
    /// pickle wrote once and referred to again is one `Rc` in the tree.
    Str(*const u8),
    Global(Rc<str>),
    /// A value written once and never referred to again (a persistent id, a tensor's hooks).
    Anon(u32),
}

struct Writer<'a> {
    p: &'a Pickle,
    out: Vec<u8>,
    memo: HashMap<MemoKey, u32>,
    storage_keys: HashMap<NodeId, (usize, Rc<str>)>,
    /// The strings torch writes from constants (`'storage'`, `'cpu'`, `'latin1'`), one object each.
    constants: HashMap<&'static str, Rc<str>>,
    /// Every string memoised, kept alive so that no later string takes its address.
    strings: Vec<Rc<str>>,
    storages: Vec<NodeId>,
    depth: usize,
}

/// Pickles `root` (a value of `p`'s tree).
pub fn write(p: &Pickle, root: &Value) -> Result<Written, WriteError> {
    if let Some(what) = &p.lossy {
        return Err(WriteError::Lossy(what.clone()));
    }
    let mut w = Writer { p, out: vec![0x80, 2], memo: HashMap::new(), storage_keys: HashMap::new(), constants: HashMap::new(), strings: Vec::new(), storages: Vec::new(), depth: 0 };
    w.value(root)?;
    w.out.push(b'.');
    Ok(Written { bytes: w.out, storages: w.storages })
}

/// torch's storage class for a dtype (`torch.FloatStorage`, ...).
pub fn storage_class(dtype: StorageDtype) -> &'static str {
    match dtype {
        StorageDtype::Float32 => "torch.FloatStorage",
        StorageDtype::Float16 => "torch.HalfStorage",
        StorageDtype::BFloat16 => "torch.BFloat16Storage",
        StorageDtype::Float64 => "torch.DoubleStorage",
        StorageDtype::Int64 => "torch.LongStorage",
        StorageDtype::Int32 => "torch.IntStorage",
        StorageDtype::Int16 => "torch.ShortStorage",
        StorageDtype::Int8 => "torch.CharStorage",
        StorageDtype::UInt8 => "torch.ByteStorage",
        StorageDtype::Bool => "torch.BoolStorage",
    }
}

/// The fewest little-endian two's complement bytes that hold `v` (none for 0), as Python's
/// `encode_long` writes them.
fn encode_long(v: i64) -> Vec<u8> {
    if v == 0 {
        return Vec::new();
    }
    let mut b = v.to_le_bytes().to_vec();
    while b.len() > 1 {
        let (last, prev) = (b[b.len() - 1], b[b.len() - 2]);
        if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
            b.pop();
        } else {
            break;
        }
    }
    b
}

impl Writer<'_> {
    fn put(&mut self, key: MemoKey) {
        let idx = self.memo.len() as u32;
        if idx < 256 {
            self.out.extend([b'q', idx as u8]);
        } else {
            self.out.push(b'r');
            self.out.extend(idx.to_le_bytes());
        }
        self.memo.insert(key, idx);
    }

    fn put_anon(&mut self) {
        self.put(MemoKey::Anon(self.memo.len() as u32));
    }

    /// Writes a `GET` of `key` if it is memoised.
    fn get(&mut self, key: &MemoKey) -> bool {
        let Some(&idx) = self.memo.get(key) else { return false };
        if idx < 256 {
            self.out.extend([b'h', idx as u8]);
        } else {
            self.out.push(b'j');
            self.out.extend(idx.to_le_bytes());
        }
        true
    }

    fn int(&mut self, v: i64) {
        if (0..=0xff).contains(&v) {
            self.out.extend([b'K', v as u8]);
        } else if (0..=0xffff).contains(&v) {
            self.out.push(b'M');
            self.out.extend((v as u16).to_le_bytes());
        } else if let Ok(v) = i32::try_from(v) {
            self.out.push(b'J');
            self.out.extend(v.to_le_bytes());
        } else {
            self.long(&encode_long(v));
        }
    }

    fn long(&mut self, le: &[u8]) {
        match u8::try_from(le.len()) {
            Ok(n) => self.out.extend([0x8a, n]),
            Err(_) => {
                self.out.push(0x8b);
                self.out.extend((le.len() as u32).to_le_bytes());
            }
        }
        self.out.extend_from_slice(le);
    }

    fn constant(&mut self, s: &'static str) {
        let s = self.constants.entry(s).or_insert_with(|| Rc::from(s)).clone();
        self.str(&s);
    }

    fn str(&mut self, s: &Rc<str>) {
        let key = MemoKey::Str(s.as_ptr());
        if self.get(&key) {
            return;
        }
        self.out.push(b'X');
        self.out.extend((s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        self.put(key);
        self.strings.push(s.clone());
    }

    /// `GLOBAL 'module name'`: the name after the last dot (a nested global is [`Pickle::lossy`]).
    fn global(&mut self, name: &str) {
        let key = MemoKey::Global(Rc::from(name));
        if self.get(&key) {
            return;
        }
        let (module, attr) = name.rsplit_once('.').unwrap_or(("builtins", name));
        self.out.push(b'c');
        for part in [module, attr] {
            self.out.extend_from_slice(part.as_bytes());
            self.out.push(b'\n');
        }
        self.put(key);
    }

    /// Python 3 pickles `bytes` at protocol 2 as `_codecs.encode(text, 'latin1')`.
    fn bytes(&mut self, b: &[u8]) {
        self.global("_codecs.encode");
        let text: String = b.iter().map(|&c| char::from(c)).collect();
        self.str(&Rc::from(text.as_str()));
        self.constant("latin1");
        self.out.push(0x86);
        self.put_anon();
        self.out.push(b'R');
        self.put_anon();
    }

    fn value(&mut self, v: &Value) -> Result<(), WriteError> {
        match v {
            Value::None => self.out.push(b'N'),
            Value::Bool(true) => self.out.push(0x88),
            Value::Bool(false) => self.out.push(0x89),
            Value::Int(i) => self.int(*i),
            Value::BigInt(le) => self.long(le),
            Value::Float(f) => {
                self.out.push(b'G');
                self.out.extend(f.to_be_bytes());
            }
            Value::Str(s) => self.str(s),
            Value::Bytes(b) => self.bytes(b),
            Value::Global(g) => self.global(g),
            Value::Node(id) => {
                if self.get(&MemoKey::Node(*id)) {
                    return Ok(());
                }
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Err(WriteError::TooDeep);
                }
                self.node(*id)?;
                self.depth -= 1;
            }
        }
        Ok(())
    }

    fn node(&mut self, id: NodeId) -> Result<(), WriteError> {
        let p = self.p;
        match p.nodes.get(id).ok_or(WriteError::MissingNode(id))? {
            Node::List(items) => {
                self.out.push(b']');
                self.put(MemoKey::Node(id));
                self.appends(items)?;
            }
            Node::Tuple(items) => self.tuple(Some(id), items)?,
            Node::Dict(d) => self.dict(id, d)?,
            Node::Set(items) => {
                self.global("__builtin__.set");
                self.out.push(b']');
                self.put_anon();
                self.appends(items)?;
                self.out.push(0x85);
                self.put_anon();
                self.out.push(b'R');
                self.put(MemoKey::Node(id));
            }
            Node::Object { class, args, state, newobj } => {
                self.global(class);
                self.tuple(None, args)?;
                self.out.push(if *newobj { 0x81 } else { b'R' });
                self.end_call(id);
                if let Some(state) = state {
                    self.value(state)?;
                    self.out.push(b'b');
                }
            }
            Node::Storage(_) => self.persistent_id(id)?,
            Node::Tensor(t) => self.tensor(id, t)?,
        }
        Ok(())
    }

    /// Memoises the result of a call, unless the call's arguments already did (a cycle), as
    /// CPython's `save_reduce` does.
    fn end_call(&mut self, id: NodeId) {
        let key = MemoKey::Node(id);
        if self.memo.contains_key(&key) {
            // `POP` this copy, keep the memoised one
            self.out.push(b'0');
            self.get(&key);
        } else {
            self.put(key);
        }
    }

    fn tuple(&mut self, id: Option<NodeId>, items: &[Value]) -> Result<(), WriteError> {
        if items.is_empty() {
            self.out.push(b')');
            return Ok(());
        }
        let short = items.len() <= 3;
        if !short {
            self.out.push(b'(');
        }
        for item in items {
            self.value(item)?;
        }
        if let Some(id) = id.filter(|id| self.memo.contains_key(&MemoKey::Node(*id))) {
            // the tuple was reached through its own items: drop this copy, use the memoised one
            if short {
                self.out.extend(std::iter::repeat_n(b'0', items.len()));
            } else {
                self.out.push(b'1');
            }
            self.get(&MemoKey::Node(id));
            return Ok(());
        }
        self.out.push(if short { 0x84 + items.len() as u8 } else { b't' });
        match id {
            Some(id) => self.put(MemoKey::Node(id)),
            None => self.put_anon(),
        }
        Ok(())
    }

    fn appends(&mut self, items: &[Value]) -> Result<(), WriteError> {
        for batch in items.chunks(BATCH) {
            if let [one] = batch {
                self.value(one)?;
                self.out.push(b'a');
                continue;
            }
            self.out.push(b'(');
            for item in batch {
                self.value(item)?;
            }
            self.out.push(b'e');
        }
        Ok(())
    }

    fn dict(&mut self, id: NodeId, d: &Dict) -> Result<(), WriteError> {
        match &d.class {
            None => {
                self.out.push(b'}');
                self.put(MemoKey::Node(id));
            }
            Some(class) => {
                self.global(&class.name);
                self.tuple(None, &class.args)?;
                self.out.push(b'R');
                self.end_call(id);
            }
        }
        for batch in d.entries.chunks(BATCH) {
            if let [(k, v)] = batch {
                self.value(k)?;
                self.value(v)?;
                self.out.push(b's');
                continue;
            }
            self.out.push(b'(');
            for (k, v) in batch {
                self.value(k)?;
                self.value(v)?;
            }
            self.out.push(b'u');
        }
        if let Some(state) = d.class.as_ref().and_then(|c| c.state.as_ref()) {
            self.value(state)?;
            self.out.push(b'b');
        }
        Ok(())
    }

    /// `('storage', torch.<T>Storage, key, 'cpu', numel)` and `BINPERSID`: written at every
    /// reference, as torch's pickler does; torch.load shares one storage per key.
    fn persistent_id(&mut self, id: NodeId) -> Result<(), WriteError> {
        let Some(Node::Storage(s)) = self.p.nodes.get(id) else { return Err(WriteError::NotAStorage(id)) };
        let next = self.storages.len();
        let (key, name) = self.storage_keys.entry(id).or_insert_with(|| (next, Rc::from(next.to_string().as_str()))).clone();
        if key == next {
            self.storages.push(id);
        }
        self.out.push(b'(');
        self.constant("storage");
        self.global(storage_class(s.dtype));
        self.str(&name);
        self.constant("cpu");
        self.int(i64::try_from(s.numel).unwrap_or(i64::MAX));
        self.out.push(b't');
        self.put_anon();
        self.out.push(b'Q');
        Ok(())
    }

    fn tensor(&mut self, id: NodeId, t: &TensorRef) -> Result<(), WriteError> {
        self.global("torch._utils._rebuild_tensor_v2");
        self.out.push(b'(');
        self.persistent_id(t.storage)?;
        self.int(t.storage_offset);
        let ints = |v: &[i64]| v.iter().map(|&x| Value::Int(x)).collect::<Vec<_>>();
        self.tuple(None, &ints(&t.size))?;
        self.tuple(None, &ints(&t.stride))?;
        self.out.push(if t.requires_grad { 0x88 } else { 0x89 });
        // backward hooks: torch pickles an empty OrderedDict
        self.global("collections.OrderedDict");
        self.out.extend([b')', b'R']);
        self.put_anon();
        self.out.push(b't');
        self.put_anon();
        self.out.push(b'R');
        self.put(MemoKey::Node(id));
        Ok(())
    }
}

#[cfg(test)]
#[path = "write_tests.rs"]
mod tests;
