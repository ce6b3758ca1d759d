//! A prefixed view of a state dict that records which keys the model used, so loading can
//! report unused keys, and which tensors the model ended up with under each fairseq name, so
//! `verify` can compare them with fairseq's `model.state_dict()`.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use indexmap::IndexMap;
use tch::{Device, Kind, Tensor};

use super::ModelError;

/// What loading found besides what the model consumed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LoadReport {
    /// State-dict keys no module asked for (fairseq's strict loading would reject them).
    pub unused_keys: Vec<String>,
    /// Things fairseq would have done differently or silently (one line each).
    pub warnings: Vec<String>,
}

struct Inner<'a> {
    sd: &'a IndexMap<String, Tensor>,
    device: Device,
    kind: Kind,
    used: HashSet<String>,
    /// Names that share one parameter in fairseq (tied embeddings) -> the key whose value
    /// fairseq's `load_state_dict` leaves in that parameter.
    ties: HashMap<String, String>,
    /// fairseq state-dict name -> the tensor the model computes with.
    named: IndexMap<String, Tensor>,
    /// state-dict key -> its parameter, so tied names share one tensor as they do in fairseq.
    parameters: HashMap<String, Tensor>,
    warnings: Vec<String>,
}

/// The root of a load: owns the bookkeeping; hand out [`Weights`] with [`StateDict::root`].
pub struct StateDict<'a> {
    inner: Rc<RefCell<Inner<'a>>>,
}

impl<'a> StateDict<'a> {
    pub fn new(sd: &'a IndexMap<String, Tensor>, device: Device, kind: Kind) -> Self {
        let inner = Inner {
            sd,
            device,
            kind,
            used: HashSet::new(),
            ties: HashMap::new(),
            named: IndexMap::new(),
            parameters: HashMap::new(),
            warnings: Vec::new(),
        };
        Self { inner: Rc::new(RefCell::new(inner)) }
    }

    pub fn root(&self) -> Weights<'a> {
        Weights { inner: Rc::clone(&self.inner), prefix: String::new() }
    }

    /// Declares that `names` are one parameter in fairseq. `load_state_dict` copies each name
    /// into it in state-dict order, so the last name present wins; every name is consumed.
    pub fn tie(&self, names: &[&str]) -> Result<(), ModelError> {
        let mut inner = self.inner.borrow_mut();
        let present: Vec<(usize, &str)> = names
            .iter()
            .filter_map(|n| inner.sd.get_index_of(*n).map(|i| (i, *n)))
            .collect();
        let Some(&(_, winner)) = present.iter().max_by_key(|(i, _)| *i) else {
            return Err(ModelError::MissingKey(names.last().copied().unwrap_or_default().to_string()));
        };
        let reference = &inner.sd[winner];
        let mut differing = Vec::new();
        for &(_, name) in &present {
            let other = &inner.sd[name];
            // a checkpoint stores tied parameters once; then the names are views of one storage
            let one_view = other.data_ptr() == reference.data_ptr()
                && other.kind() == reference.kind()
                && other.size() == reference.size()
                && other.stride() == reference.stride();
            let same = one_view
                || other.size() == reference.size()
                    && other
                        .f_to_kind(reference.kind())
                        .and_then(|o| o.f_equal(reference))
                        .unwrap_or(false);
            if !same {
                differing.push(name.to_string());
            }
        }
        if !differing.is_empty() {
            let msg = format!("tied weights differ: {} (fairseq keeps `{winner}`)", differing.join(", "));
            inner.warnings.push(msg);
        }
        for name in names {
            inner.ties.insert((*name).to_string(), winner.to_string());
        }
        Ok(())
    }

    pub fn warn(&self, message: String) {
        self.inner.borrow_mut().warnings.push(message);
    }

    /// Unused keys (in state-dict order), warnings, and the tensors by fairseq name.
    pub fn finish(self) -> (LoadReport, IndexMap<String, Tensor>) {
        let mut inner = self.inner.borrow_mut();
        let unused_keys = inner.sd.keys().filter(|k| !inner.used.contains(*k)).cloned().collect();
        let report = LoadReport { unused_keys, warnings: std::mem::take(&mut inner.warnings) };
        (report, std::mem::take(&mut inner.named))
    }
}

/// A state dict seen from one module: `get("weight")` under prefix `encoder.layers.0.fc1`
/// reads `encoder.layers.0.fc1.weight`.
#[derive(Clone)]
pub struct Weights<'a> {
    inner: Rc<RefCell<Inner<'a>>>,
    prefix: String,
}

/// libtorch's CPU allocator aligns every allocation to 64 bytes.
const ALIGNMENT: usize = 64;

/// The parameter fairseq would copy `raw` into. A conversion already allocates; otherwise the
/// checkpoint's own (aligned) memory is shared rather than copied, so loading does not hold the
/// weights twice. A misaligned view into a checkpoint storage is copied: small GEMMs take other
/// kernels, with other bits, on misaligned operands.
fn parameter(raw: &Tensor, device: Device, kind: Kind) -> Result<Tensor, ModelError> {
    let converted = raw.f_to_device(device)?.f_to_kind(kind)?.f_contiguous()?;
    let tensor = if converted.data_ptr() != raw.data_ptr() {
        converted
    } else if (converted.data_ptr() as usize).is_multiple_of(ALIGNMENT) {
        // a separate, non-view handle: requires_grad below must not touch the checkpoint's
        converted.f_detach()?
    } else {
        let mut fresh = converted.f_empty_like()?;
        fresh.f_copy_(&converted)?;
        fresh
    };
    Ok(tensor.f_set_requires_grad(true)?)
}

impl<'a> Weights<'a> {
    pub fn sub(&self, name: &str) -> Weights<'a> {
        Weights { inner: Rc::clone(&self.inner), prefix: self.key(name) }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn key(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        let key = self.key(name);
        let inner = self.inner.borrow();
        inner.sd.contains_key(&key) || inner.ties.contains_key(&key)
    }

    pub fn device(&self) -> Device {
        self.inner.borrow().device
    }

    pub fn kind(&self) -> Kind {
        self.inner.borrow().kind
    }

    /// The tensor under `name` as the `nn.Parameter` fairseq copies it into: cast to the model
    /// dtype and device, 64-byte aligned like a fresh allocation, and `requires_grad` (which is
    /// not inert even under no_grad: `matmul` folds a 3-D input into one `mm` only when the
    /// weight requires grad, and the output projection of a decoding step gives other bits when
    /// it does not). Tied names get one shared tensor. `expected` entries of -1 accept any size.
    pub fn get(&self, name: &str, expected: &[i64]) -> Result<Tensor, ModelError> {
        let key = self.key(name);
        let mut inner = self.inner.borrow_mut();
        let source = inner.ties.get(&key).cloned().unwrap_or_else(|| key.clone());
        let Some(raw) = inner.sd.get(&source) else {
            return Err(ModelError::MissingKey(key));
        };
        let actual = raw.size();
        let fits = actual.len() == expected.len()
            && actual.iter().zip(expected).all(|(a, e)| *e < 0 || a == e);
        if !fits {
            return Err(ModelError::Shape { key, expected: expected.to_vec(), actual });
        }
        let tensor = match inner.parameters.get(&source) {
            Some(shared) => shared.shallow_clone(),
            None => {
                let tensor = parameter(raw, inner.device, inner.kind)?;
                inner.parameters.insert(source, tensor.shallow_clone());
                tensor
            }
        };
        inner.used.insert(key.clone());
        inner.named.insert(key, tensor.shallow_clone());
        Ok(tensor)
    }

    pub fn get_opt(&self, name: &str, expected: &[i64]) -> Result<Option<Tensor>, ModelError> {
        if self.contains(name) {
            self.get(name, expected).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Marks `name` used without loading it (buffers fairseq overwrites or ignores).
    pub fn consume(&self, name: &str) {
        let key = self.key(name);
        self.inner.borrow_mut().used.insert(key);
    }

    /// Records a tensor that fairseq's `state_dict()` lists under `name` but that fairseq
    /// derives from other weights when it loads (the encoder layers' fused fast-path weights).
    pub fn register(&self, name: &str, tensor: &Tensor) -> Result<(), ModelError> {
        let key = self.key(name);
        let tensor = tensor.f_set_requires_grad(true)?;
        let mut inner = self.inner.borrow_mut();
        inner.used.insert(key.clone());
        inner.named.insert(key, tensor);
        Ok(())
    }

    /// The `version` buffer of an encoder/decoder (fairseq reads a missing one as 1).
    pub fn version(&self) -> Result<f64, ModelError> {
        let key = self.key("version");
        let mut inner = self.inner.borrow_mut();
        let value = match inner.sd.get(&key) {
            Some(t) => t.f_flatten(0, -1)?.f_double_value(&[0])?,
            None => 1.0,
        };
        if inner.sd.contains_key(&key) {
            let kind = inner.kind;
            let device = inner.device;
            let buffer = Tensor::f_from_slice(&[value as f32])?.f_to_kind(kind)?.f_to_device(device)?;
            inner.used.insert(key.clone());
            inner.named.insert(key, buffer);
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_dict(entries: &[(&str, Tensor)]) -> IndexMap<String, Tensor> {
        entries.iter().map(|(k, t)| (k.to_string(), t.shallow_clone())).collect()
    }

    #[test]
    fn aligned_weights_are_shared_misaligned_views_copied_and_ties_are_one_tensor() {
        let storage = Tensor::arange(33, (Kind::Float, Device::Cpu));
        let aligned = storage.narrow(0, 0, 16).view([4, 4]);
        // one f32 past an aligned start: 4 bytes off the 64-byte alignment
        let misaligned = storage.narrow(0, 17, 16).view([4, 4]);
        let sd = state_dict(&[("a.weight", aligned.shallow_clone()), ("b.weight", misaligned.shallow_clone())]);
        let state = StateDict::new(&sd, Device::Cpu, Kind::Float);
        state.tie(&["a.weight", "c.weight"]).unwrap();
        let root = state.root();
        let a = root.sub("a").get("weight", &[4, 4]).unwrap();
        let b = root.sub("b").get("weight", &[-1, 4]).unwrap();
        let c = root.sub("c").get("weight", &[4, 4]).unwrap();
        assert_eq!(a.data_ptr(), aligned.data_ptr());
        assert_ne!(b.data_ptr(), misaligned.data_ptr());
        assert_eq!(b.data_ptr() as usize % ALIGNMENT, 0);
        assert_eq!(c.data_ptr(), a.data_ptr());
        assert!(a.requires_grad() && b.requires_grad() && c.requires_grad());
        // the checkpoint's own tensors are left as they were
        assert!(!aligned.requires_grad());
        assert!(b.equal(&misaligned) && a.equal(&aligned));
        // a conversion allocates anyway
        let half = StateDict::new(&sd, Device::Cpu, Kind::Half);
        let h = half.root().sub("a").get("weight", &[4, 4]).unwrap();
        assert_ne!(h.data_ptr(), aligned.data_ptr());
        assert_eq!(h.kind(), Kind::Half);
    }

    #[test]
    fn tied_names_warn_only_when_their_values_differ() {
        let storage = Tensor::arange(16, (Kind::Float, Device::Cpu)).view([4, 4]);
        let warnings = |other: Tensor| {
            let sd = state_dict(&[("a.weight", storage.shallow_clone()), ("b.weight", other)]);
            let state = StateDict::new(&sd, Device::Cpu, Kind::Float);
            state.tie(&["a.weight", "b.weight"]).unwrap();
            state.finish().0.warnings
        };
        assert!(warnings(storage.shallow_clone()).is_empty(), "one storage");
        assert!(warnings(storage.copy()).is_empty(), "equal copies");
        assert!(warnings(storage.transpose(0, 1)).iter().any(|w| w.contains("tied weights differ: a.weight")), "a transposed view of the same storage");
        assert!(warnings(storage.copy() + 1.0).iter().any(|w| w.contains("tied weights differ: a.weight")));
    }
}
