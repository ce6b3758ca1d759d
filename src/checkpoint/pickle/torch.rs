//! What the allow-listed callables mean: torch's tensor and storage rebuild functions,
//! `OrderedDict`, `torch.Size`, `_codecs.encode`, sets; every other callable becomes an opaque
//! [`Node::Object`]. Persistent ids name storages.

use std::rc::Rc;

use super::vm::Vm;
use super::*;

impl Vm<'_> {
    pub(super) fn int_arg(&self, at: usize, v: &Value, what: &str) -> Result<i64, PickleError> {
        match v {
            Value::Int(i) => Ok(*i),
            Value::Bool(b) => Ok(i64::from(*b)),
            _ => Err(self.err(at, format!("{what} must be an int, got {}", self.out.type_name(v)))),
        }
    }

    pub(super) fn int_tuple(&self, at: usize, v: &Value, what: &str) -> Result<Vec<i64>, PickleError> {
        let items = self.tuple_items(at, v).map_err(|_| self.err(at, format!("{what} must be a tuple")))?;
        items.iter().map(|x| self.int_arg(at, x, what)).collect()
    }

    /// `REDUCE`/`NEWOBJ`/`OBJ`/`INST`: interprets allow-listed callables, describes the rest.
    pub(super) fn call(&mut self, at: usize, callable: &Value, args: Vec<Value>) -> Result<Value, PickleError> {
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
                if name.as_ref() == "collections.defaultdict" {
                    d.class = Some(DictClass { name: name.clone(), args, state: None });
                    return Ok(self.new_node(Node::Dict(d)));
                }
                if let Some(first) = args.first() {
                    if let Some(Node::List(pairs)) | Some(Node::Tuple(pairs)) = self.out.node(first) {
                        for p in pairs.clone() {
                            match self.out.node(&p) {
                                Some(Node::Tuple(kv)) | Some(Node::List(kv)) if kv.len() == 2 => d.insert(kv[0].clone(), kv[1].clone()),
                                _ => return Err(self.err(at, "OrderedDict argument is not a list of pairs")),
                            }
                        }
                    } else {
                        let what = self.out.type_name(first);
                        self.note_lossy(|| format!("{name}() of a {what}"));
                    }
                }
                if name.as_ref() == "collections.OrderedDict" {
                    d.class = Some(DictClass { name: name.clone(), args: Vec::new(), state: None });
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
                let requires_grad = matches!(args.get(4), Some(Value::Bool(true)));
                // backward hooks (torch pickles an empty OrderedDict) and conj/neg metadata
                if args.iter().skip(5).any(|a| *a != Value::None && self.out.dict(a).is_none_or(|d| !d.is_empty())) {
                    self.note_lossy(|| "a tensor with backward hooks or metadata".into());
                }
                Ok(self.new_node(Node::Tensor(TensorRef { storage, storage_offset, size, stride, requires_grad })))
            }
            "torch._utils._rebuild_parameter" | "torch._utils._rebuild_parameter_with_state" => {
                self.note_lossy(|| "an nn.Parameter (read as its tensor)".into());
                args.into_iter().next().ok_or_else(|| self.err(at, format!("{name} without arguments")))
            }
            "torch._tensor._rebuild_from_type_v2" => {
                // (func, new_type, args, state): a tensor subclass; rebuild the plain tensor.
                if args.len() < 3 {
                    return Err(self.err(at, "_rebuild_from_type_v2 needs 3 arguments"));
                }
                self.note_lossy(|| "a tensor subclass or a tensor with attributes (read as a plain tensor)".into());
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
                if name.ends_with("frozenset") {
                    self.note_lossy(|| "a frozenset (read as a set)".into());
                }
                let items = match args.first() {
                    Some(v) => match self.out.node(v) {
                        Some(Node::List(l)) | Some(Node::Tuple(l)) | Some(Node::Set(l)) => l.clone(),
                        _ => return Err(self.err(at, "set() argument is not a sequence")),
                    },
                    None => Vec::new(),
                };
                Ok(self.new_node(Node::Set(items)))
            }
            "builtins.bytearray" | "__builtin__.bytearray" => {
                self.note_lossy(|| "a bytearray (read as bytes)".into());
                match args.first() {
                    None => Ok(Value::Bytes(Rc::from(&[][..]))),
                    Some(Value::Bytes(b)) => Ok(Value::Bytes(b.clone())),
                    Some(other) => Err(self.err(at, format!("bytearray() of a {}", self.out.type_name(other)))),
                }
            }
            _ => Ok(self.new_node(Node::Object { class: name.to_string(), args, state: None, newobj: false })),
        }
    }

    /// torch persistent ids: `('storage', <storage class>, key, location, numel[, view_metadata])`.
    pub(super) fn persistent_load(&mut self, at: usize, pid: Value) -> Result<Value, PickleError> {
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
