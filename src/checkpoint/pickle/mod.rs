//! A pickle reader (protocols 0-5) that builds a value tree and never executes anything.
//!
//! Containers live in an arena ([`Pickle::nodes`]) and values refer to them by index, so memo
//! aliasing is exact (a dict memoised while empty and filled later by `SETITEMS` is the same
//! node everywhere), reference cycles (omegaconf's `_parent`) cost nothing and dropping a deeply
//! nested tree never recurses. Globals are never imported: a short allow-list
//! (`torch._utils` rebuild functions, storage classes, `OrderedDict`, `torch.Size`,
//! `_codecs.encode`, `set`/`frozenset`/`bytearray`) is interpreted, every other callable becomes
//! an opaque [`Node::Object`] that keeps its class name, arguments and `BUILD` state.
//! What the tree keeps is enough to write it back ([`write`]); where it keeps only part of a
//! construct, [`Pickle::lossy`] says so.
//!
//! This module depends on std only (plus `thiserror`), so it can be fuzzed without libtorch.

use std::collections::HashMap;
use std::rc::Rc;

mod literals;
mod torch;
mod vm;
pub mod write;
#[cfg(test)]
mod tests;

use vm::Vm;

/// Largest memo index accepted (`LONG_BINPUT` takes a u32; the memo is a hash map, so this only
/// bounds the number of entries, not an allocation).
pub(crate) const MAX_MEMO_ENTRIES: usize = 1 << 24;
/// Largest VM stack. Every push costs at least one opcode byte, so only a pickle of many MiB of
/// `DUP`/`BINGET` opcodes gets here; it bounds the stack's memory.
pub(crate) const MAX_STACK: usize = 1 << 24;

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
    /// An integer too large for i64, little-endian two's complement (as `LONG1`/`LONG4` store it;
    /// a protocol-0 `LONG` literal is converted to the same form).
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
    /// `requires_grad` as pickled (false for `_rebuild_tensor` and for state dicts).
    pub requires_grad: bool,
}

/// Ordered dict with any keys; string and int keys are indexed for `SETITEM` replacement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dict {
    pub entries: Vec<(Value, Value)>,
    index: HashMap<HashKey, usize>,
    /// The class it was made by when not a plain `dict` (`collections.OrderedDict`, ...).
    pub class: Option<DictClass>,
}

/// A dict made by calling a class, e.g. `collections.OrderedDict()` or
/// `collections.defaultdict(list)`, then filled by `SETITEMS`.
#[derive(Debug, Clone, PartialEq)]
pub struct DictClass {
    /// `module.name`, as pickled.
    pub name: Rc<str>,
    /// The call's arguments other than the items (a defaultdict's factory).
    pub args: Vec<Value>,
    /// `BUILD` state: an `OrderedDict`'s attributes, e.g. a module state dict's `_metadata`.
    pub state: Option<Value>,
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
    Object {
        class: String,
        args: Vec<Value>,
        state: Option<Value>,
        /// Made by `NEWOBJ` (`class.__new__(class, *args)`, also `OBJ`/`INST` without
        /// arguments) rather than called by `REDUCE`.
        newobj: bool,
    },
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
    /// The first construct the tree keeps only in part (an `nn.Parameter` read as its tensor, a
    /// `frozenset` read as a set, ...): the tree reads the same, but written back it would not be.
    pub lossy: Option<String>,
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
