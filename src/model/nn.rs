//! The small torch modules every layer uses: `nn.Linear`, fairseq's `LayerNorm`, activations.

use tch::{Kind, Tensor};

use std::sync::Arc;

use crate::kernels::gemm::{PackedWeight, Precision};
use crate::kernels::gemm_i8::PackedInt8;
use crate::kernels::norm::HostLayerNorm;
use crate::kernels::gemm_nt::TableProjection;
use crate::libtorch::reuse::BufferPool;
use crate::kernels::int8::Int8Weight;
use super::weights::Weights;
use super::ModelError;

/// `nn.Linear`: `F.linear(x, weight, bias)` with `weight` `[out, in]`; in int8 when
/// [`Linear::quantize_int8`] was called, and on the host from packed panels when
/// [`Linear::pack_for_host`] was.
#[derive(Debug)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    /// `weight.t()`, made once: `F.linear` makes it on every call (with its autograd view
    /// metadata, the weight being a parameter) before it reaches the same `addmm`.
    weight_t: Option<Tensor>,
    int8: Option<Int8Weight>,
    packed: Option<Arc<PackedWeight>>,
    table: Option<TableProjection>,
}

impl Linear {
    pub fn load(w: &Weights, in_features: i64, out_features: i64, bias: bool) -> Result<Self, ModelError> {
        let weight = w.get("weight", &[out_features, in_features])?;
        let bias = if bias { Some(w.get("bias", &[out_features])?) } else { None };
        Ok(Self::from_tensors(weight, bias))
    }

    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Self {
        let weight_t = if weight.dim() == 2 { tch::no_grad(|| weight.f_tr().ok()) } else { None };
        Self { weight, bias, weight_t, int8: None, packed: None, table: None }
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        self.forward_with_bias(x, self.bias.as_ref())
    }

    /// `F.linear(x, weight, bias)` with a bias from elsewhere (fairseq's concatenated in_proj bias).
    pub fn forward_with_bias(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor, ModelError> {
        if let Some(y) = self.host_linear(x, bias, false)? {
            return Ok(y);
        }
        match &self.int8 {
            // the bias was packed with the weight; the only other bias handed in is the
            // in_proj slice of the same layer's own bias
            Some(q) => Ok(q.linear(x)?),
            None => self.addmm_or_linear(x, bias),
        }
    }

    /// `F.linear(x, weight, bias)` as ATen computes it: where it reaches `addmm(bias,
    /// x.flatten(0, -2), weight.t())` (a 2-D input, or a contiguous one with a contiguous 1-D
    /// bias), that `addmm` on the kept `weight.t()`; elsewhere `linear` itself.
    fn addmm_or_linear(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor, ModelError> {
        let (Some(bias), Some(weight_t)) = (bias, &self.weight_t) else {
            return Ok(x.f_linear(&self.weight, bias)?);
        };
        let size = x.size();
        match size.split_last() {
            Some((_, outer)) if outer.len() == 1 => Ok(bias.f_addmm(x, weight_t)?),
            Some((&in_features, outer)) if outer.len() > 1 && x.is_contiguous() && bias.dim() == 1 && bias.is_contiguous() => {
                let rows: i64 = outer.iter().product();
                let y = bias.f_addmm(&x.f_view([rows, in_features])?, weight_t)?;
                let out: Vec<i64> = outer.iter().copied().chain(y.size().get(1).copied()).collect();
                Ok(y.f_view(out.as_slice())?)
            }
            _ => Ok(x.f_linear(&self.weight, Some(bias))?),
        }
    }

    /// `relu(F.linear(x, weight, bias))`, in one pass on the host when the weight was packed.
    pub fn forward_relu(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        if let Some(y) = self.host_linear(x, self.bias.as_ref(), true)? {
            return Ok(y);
        }
        // in place: the linear's output is fresh, and relu_ is relu's kernel
        let mut y = self.forward(x)?;
        let _ = y.f_relu_()?;
        Ok(y)
    }

    /// [`Linear::forward`] into a buffer of `pool` (the output projection's logits, reused from
    /// step to step) when the weight was packed.
    pub fn forward_pooled(&self, x: &Tensor, pool: &BufferPool) -> Result<Tensor, ModelError> {
        if let Some(table) = &self.table {
            let x = x.f_contiguous()?;
            let mut size = x.size();
            if let (Some(last), Some(&vocab)) = (size.last_mut(), self.weight.size().first()) {
                *last = vocab;
            }
            if let Some(y) = table.forward(&x, Some(pool.take(&size)?))? {
                return Ok(y);
            }
        }
        if let Some(w) = &self.packed {
            let x = x.f_contiguous()?;
            let mut size = x.size();
            if let Some(last) = size.last_mut() {
                *last = w.out_features() as i64;
            }
            let mut y = pool.take(&size)?;
            if w.linear_into(&x, &mut y, false)? {
                return Ok(y);
            }
        }
        self.forward(x)
    }

    /// The packed path, for an f32 CPU input (made contiguous). Every bias handed to a layer is
    /// its own in value (the in_proj slices of `forward_torch` are its own bias), and the packed
    /// weight carries it.
    fn host_linear(&self, x: &Tensor, bias: Option<&Tensor>, relu: bool) -> Result<Option<Tensor>, ModelError> {
        if let Some(table) = self.table.as_ref().filter(|_| bias.is_none() && !relu) {
            return Ok(table.forward(&x.f_contiguous()?, None)?);
        }
        match &self.packed {
            Some(w) if bias.is_some() == self.bias.is_some() => Ok(w.linear(&x.f_contiguous()?, relu)?),
            _ => Ok(None),
        }
    }

    /// The host kernel [`Linear::forward`] (or [`Linear::forward_relu`], with `relu`) computes
    /// with, for a caller that holds its operands in host buffers (`host_step.rs`); None where
    /// it computes through libtorch.
    pub fn host_kernel(&self, relu: bool) -> Option<HostKernel<'_>> {
        if let Some(table) = self.table.as_ref().filter(|_| self.bias.is_none() && !relu) {
            return Some(HostKernel::Table(table));
        }
        if let Some(packed) = &self.packed {
            return Some(HostKernel::Packed(packed));
        }
        match &self.int8 {
            Some(Int8Weight::Host(int8)) => Some(HostKernel::Int8(int8)),
            _ => None,
        }
    }

    /// Computes on the host from panels packed in `precision` from now on (`kernels/gemm.rs`),
    /// where the CPU allows; returns whether it does.
    pub fn pack_for_host(&mut self, precision: Precision) -> Result<bool, ModelError> {
        if self.int8.is_some() || self.table.is_some() {
            return Ok(false);
        }
        if self.packed.is_none() {
            self.packed = PackedWeight::pack_with(precision, &self.weight, self.bias.as_ref())?.map(Arc::new);
        }
        Ok(self.packed.is_some())
    }

    /// Computes from `packed` (a range of another layer's packed weight) from now on.
    pub fn set_packed(&mut self, packed: PackedWeight) {
        self.packed = Some(Arc::new(packed));
    }

    /// Computes on the host from the weight as it is (`kernels/gemm_nt.rs`): for an output
    /// projection without bias whose weight is the embedding table, held once for both. Returns
    /// whether it does.
    pub fn compute_from_table(&mut self) -> bool {
        if self.bias.is_some() || self.int8.is_some() {
            return false;
        }
        self.table = TableProjection::new(&self.weight);
        self.table.is_some()
    }

    /// The packed weight, to share (another layer's range of it).
    pub fn packed(&self) -> Option<&Arc<PackedWeight>> {
        self.packed.as_ref()
    }

    /// The weight quantized for the host's int8 kernel, to share (an embedding table tied to it).
    pub fn packed_int8(&self) -> Option<&Arc<PackedInt8>> {
        match &self.int8 {
            Some(Int8Weight::Host(int8)) => Some(int8),
            _ => None,
        }
    }

    /// Lets go of the libtorch weight once it is packed or quantized, so that the packed panels
    /// (or fbgemm's int8 weight) are the one copy; the layer then computes only with those.
    pub fn release_weight(&mut self) {
        if self.packed.is_some() || self.int8.is_some() {
            self.weight = Tensor::new();
            self.weight_t = None;
        }
    }

    /// Whether the layer computes from bfloat16 panels (`--compute-type bfloat16` on the CPU).
    pub fn is_bfloat16(&self) -> bool {
        self.packed.as_ref().is_some_and(|p| p.precision() == Precision::Bf16)
    }

    /// Whether the layer computes in int8 ([`Linear::quantize_int8`]).
    pub fn is_int8(&self) -> bool {
        self.int8.is_some()
    }

    pub fn quantize_int8(&mut self) -> Result<(), ModelError> {
        self.int8 = Some(Int8Weight::quantize(&self.weight, self.bias.as_ref())?);
        Ok(())
    }
}

/// A linear layer's host kernel ([`Linear::host_kernel`]): `y = x · Wᵀ + b` on slices, `x`
/// `[rows, in]` and `y` `[rows, out]`.
#[derive(Clone, Copy)]
pub enum HostKernel<'a> {
    Packed(&'a PackedWeight),
    Int8(&'a PackedInt8),
    Table(&'a TableProjection),
}

impl HostKernel<'_> {
    pub fn in_features(&self) -> usize {
        match self {
            Self::Packed(p) => p.in_features(),
            Self::Int8(q) => q.in_features(),
            Self::Table(t) => t.shape().1,
        }
    }

    pub fn out_features(&self) -> usize {
        match self {
            Self::Packed(p) => p.out_features(),
            Self::Int8(q) => q.out_features(),
            Self::Table(t) => t.shape().0,
        }
    }

    /// `y = x · Wᵀ + b`, then ReLU with `relu` (which a table projection never takes); false
    /// (nothing written) when the lengths do not fit.
    pub fn gemm(&self, x: &[f32], y: &mut [f32], relu: bool) -> bool {
        let (k, n) = (self.in_features(), self.out_features());
        let rows = x.len() / k.max(1);
        if k == 0 || rows * k != x.len() || y.len() != rows * n {
            return false;
        }
        match self {
            Self::Packed(p) => p.gemm(x, y, relu),
            Self::Int8(q) => q.gemm(x, y, relu),
            Self::Table(t) => return !relu && t.gemm(x, y),
        }
        true
    }
}

/// fairseq's `LayerNorm` is `torch.nn.LayerNorm` (eps 1e-5) unless apex is installed; the
/// reference environment has no apex.
#[derive(Debug)]
pub struct LayerNorm {
    pub weight: Tensor,
    pub bias: Tensor,
    pub eps: f64,
    dim: i64,
    host: Option<HostLayerNorm>,
}

impl LayerNorm {
    pub const EPS: f64 = 1e-5;

    pub fn load(w: &Weights, dim: i64) -> Result<Self, ModelError> {
        Ok(Self { weight: w.get("weight", &[dim])?, bias: w.get("bias", &[dim])?, eps: Self::EPS, dim, host: None })
    }

    /// The final `layer_norm` of an encoder or decoder (`side`) as `upgrade_state_dict_named`
    /// leaves it: loaded when `wanted`, unless the checkpoint's version predates it
    /// (`versioned` false) and carries no weights for it; when it does carry them, they are used
    /// and a warning says so.
    pub fn load_final(w: &Weights, dim: i64, side: &str, wanted: bool, versioned: impl Fn(f64) -> bool, warnings: &mut Vec<String>) -> Result<Option<Self>, ModelError> {
        let version = w.version()?;
        match (wanted, versioned(version), w.contains("layer_norm.weight")) {
            (true, true, _) => Ok(Some(Self::load(&w.sub("layer_norm"), dim)?)),
            (true, false, true) => {
                warnings.push(format!(
                    "{side}.version is {version} (fairseq drops the final layer norm) but {side}.layer_norm is present: applying it"
                ));
                Ok(Some(Self::load(&w.sub("layer_norm"), dim)?))
            }
            _ => Ok(None),
        }
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        if let Some(y) = self.host_forward(x, None)? {
            return Ok(y);
        }
        // F.layer_norm passes torch.backends.cudnn.enabled (true by default).
        Ok(x.f_layer_norm([self.dim].as_slice(), Some(&self.weight), Some(&self.bias), self.eps, true)?)
    }

    /// `forward(residual + x)`, in one pass on the host after [`LayerNorm::to_host`].
    pub fn forward_residual(&self, residual: &Tensor, x: &Tensor) -> Result<Tensor, ModelError> {
        if let Some(y) = self.host_forward(x, Some(residual))? {
            return Ok(y);
        }
        self.forward(&residual.f_add(x)?)
    }

    /// Computes on the host from now on (`kernels/norm.rs`), for float32 CPU inputs.
    pub fn to_host(&mut self) -> Result<(), ModelError> {
        self.host = HostLayerNorm::new(&self.weight, &self.bias, self.eps)?;
        Ok(())
    }

    /// The host kernel after [`LayerNorm::to_host`].
    pub fn host(&self) -> Option<&HostLayerNorm> {
        self.host.as_ref()
    }

    fn host_forward(&self, x: &Tensor, residual: Option<&Tensor>) -> Result<Option<Tensor>, ModelError> {
        match &self.host {
            Some(h) => Ok(h.forward(x, residual)?),
            None => Ok(None),
        }
    }
}

/// A Python float in one of fairseq's tensor expressions (`q *= self.scaling`,
/// `self.embed_scale * x`): libtorch takes it as a double operand and computes in the op's math
/// type (f32 for float16 and bfloat16 tensors). The in-place `*_scalar_` ops round the scalar to
/// the tensor's dtype first, which moves float16 results (an f32 tensor gets the same bits either
/// way).
pub fn python_float(value: f64) -> Result<Tensor, tch::TchError> {
    Tensor::f_scalar_tensor(value, (Kind::Double, tch::Device::Cpu))
}

/// `utils.get_activation_fn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivationFn {
    Relu,
    ReluSquared,
    /// fairseq's `gelu`: `F.gelu(x.float()).type_as(x)`. Not `F.gelu` itself, which is why it
    /// never takes the encoder fast path.
    Gelu,
    /// `gelu_accurate` (alias `gelu_fast`): the tanh approximation in the model dtype.
    GeluAccurate,
    Tanh,
    Linear,
}

impl ActivationFn {
    pub fn from_name(name: &str) -> Result<Self, ModelError> {
        Ok(match name {
            "relu" => Self::Relu,
            "relu_squared" => Self::ReluSquared,
            "gelu" => Self::Gelu,
            "gelu_fast" | "gelu_accurate" => Self::GeluAccurate,
            "tanh" => Self::Tanh,
            "linear" => Self::Linear,
            other => return Err(ModelError::Activation(other.to_string())),
        })
    }

    pub fn forward(self, x: &Tensor) -> Result<Tensor, ModelError> {
        Ok(match self {
            Self::Relu => x.f_relu()?,
            Self::ReluSquared => x.f_relu()?.f_pow_tensor_scalar(2)?,
            Self::Gelu => x.f_to_kind(Kind::Float)?.f_gelu("none")?.f_to_kind(x.kind())?,
            Self::GeluAccurate => {
                // 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3)))), in this order
                let a = (2.0 / std::f64::consts::PI).sqrt();
                let cube = x.f_pow_tensor_scalar(3)?.f_mul(&python_float(0.044715)?)?;
                let inner = x.f_add(&cube)?.f_mul(&python_float(a)?)?.f_tanh()?.f_add_scalar(1)?;
                x.f_mul(&python_float(0.5)?)?.f_mul(&inner)?
            }
            Self::Tanh => x.f_tanh()?,
            Self::Linear => x.shallow_clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    /// `q *= 0.1767...` in Python multiplies a float16 `q` in f32 by the double's f32 value;
    /// libtorch's in-place `mul_.Scalar` (tch's `mul_scalar_`) rounds the scalar to float16 first
    /// (0.1768) and moves about one element in ten by an ulp. In f32 the two are the same.
    #[test]
    fn a_python_float_multiplies_in_the_op_math_type_as_python_does() {
        let mut rng = TestRng::new(760);
        let scaling = 32f64.powf(-0.5);
        let x = rng.randn([4096]);
        let half = x.to_kind(Kind::Half);
        let python = half.f_mul(&python_float(scaling).unwrap()).unwrap();
        let by_hand = (half.to_kind(Kind::Float) * (scaling as f32) as f64).to_kind(Kind::Half);
        assert_eq!(python.kind(), Kind::Half);
        assert!(python.equal(&by_hand));
        let mut scalar_op = half.copy();
        let _ = scalar_op.f_mul_scalar_(scaling).unwrap();
        assert!(!python.equal(&scalar_op), "mul_.Scalar no longer rounds its scalar: python_float may go");
        assert!(x.f_mul(&python_float(scaling).unwrap()).unwrap().equal(&x.f_mul_scalar(scaling).unwrap()));
    }

    #[test]
    fn activations_follow_fairseq_names() {
        assert_eq!(ActivationFn::from_name("gelu_fast").unwrap(), ActivationFn::GeluAccurate);
        assert!(matches!(ActivationFn::from_name("swish"), Err(ModelError::Activation(_))));
        let x = Tensor::from_slice(&[-2.0f32, -0.5, 0.0, 0.5, 2.0]);
        let ours = ActivationFn::GeluAccurate.forward(&x).unwrap();
        let torch = x.gelu("tanh");
        assert!(crate::tolerance::SAME_FORMULA.holds((ours - torch).abs().max().double_value(&[])));
        let relu_sq = ActivationFn::ReluSquared.forward(&x).unwrap();
        assert_eq!(Vec::<f32>::try_from(relu_sq).unwrap(), [0., 0., 0., 0.25, 4.]);
    }

    /// fairseq's `LayerNorm(16)` (torch's, eps 1e-5) on rows whose variance (3.8e-7, 6.0e-6) is
    /// below its eps, so that the eps carries a large part of the normalization: an eps of
    /// 1.1e-5 moves these outputs by 3% of their largest. Golden: fairseq 0.12.2 on torch 2.13
    /// (float32), within verify's derived bound for one layer, 12 · eps · max|ref|
    /// (docs/testing.md, "Tolerances"); float32 against float64 differs by 0.32 · eps · max|ref|.
    #[test]
    fn layer_norm_matches_fairseq_where_its_eps_dominates() {
        #[rustfmt::skip]
        let x: [f32; 32] = [
            -0.0009000000427477062, 3.3333322789985687e-05, 0.0009666667319834232, -0.0002333333541173488,
            0.0007000000332482159, -0.0005000000237487257, 0.00043333336361683905, -0.000766666722483933,
            0.00016666666488163173, 0.0010999999940395355, -0.00010000001202570274, 0.00083333341171965,
            -0.000366666674381122, 0.0005666666547767818, -0.0006333334022201598, 0.0003000000142492354,
            0.0006000000284984708, -0.003133333520963788, 0.0016666667070239782, -0.0020666667260229588,
            0.002733333734795451, -0.0010000000474974513, 0.003800000296905637, 6.666670378763229e-05,
            -0.003666666802018881, 0.0011333334259688854, -0.0026000000070780516, 0.0022000002209097147,
            -0.001533333444967866, 0.003266667015850544, -0.0004666667082346976, -0.004200000315904617,
        ];
        #[rustfmt::skip]
        let golden: [f32; 32] = [
            -0.15520934760570526, -0.13664069771766663, 0.41814345121383667, -0.44613760709762573,
            0.6396884322166443, -0.15132910013198853, 0.21553879976272583, -0.5022152066230774,
            0.3956945836544037, -0.17018014192581177, -0.06984420120716095, 0.14532294869422913,
            0.06892244517803192, -0.18486857414245605, 0.18699447810649872, 0.08924537897109985,
            0.09986139088869095, -0.5369282960891724, 0.5412623882293701, -0.695388674736023,
            1.0492377281188965, -0.1622747778892517, 0.9987872838973999, -0.18758663535118103,
            -0.4904654622077942, -0.14632418751716614, -0.6740644574165344, 0.5865125060081482,
            -0.16608917713165283, 0.760923445224762, 0.4084603488445282, -1.4355076551437378,
        ];
        let dim = 16i64;
        // weight 0.5 + i/16, bias ±(i mod 5)/8: exact in float32
        let weight: Vec<f32> = (0..dim).map(|i| 0.5 + 0.0625 * i as f32).collect();
        let bias: Vec<f32> = (0..dim).map(|i| (if i % 2 == 0 { 1.0 } else { -1.0 }) * 0.125 * (i % 5) as f32).collect();
        let sd: indexmap::IndexMap<String, Tensor> =
            [("ln.weight".to_string(), Tensor::from_slice(&weight)), ("ln.bias".to_string(), Tensor::from_slice(&bias))].into_iter().collect();
        let state = crate::model::weights::StateDict::new(&sd, tch::Device::Cpu, Kind::Float);
        let mut ln = LayerNorm::load(&state.root().sub("ln"), dim).unwrap();
        let x = Tensor::from_slice(&x).view([2, 1, dim]);
        let golden = Tensor::from_slice(&golden).view([2, 1, dim]);
        let scale = golden.abs().max().double_value(&[]);
        let bound = 12.0 * f64::from(f32::EPSILON) * scale;
        let libtorch = ln.forward(&x).unwrap();
        ln.to_host().unwrap();
        assert!(ln.host().is_some(), "float32 weights run on the host kernel");
        let host = ln.forward(&x).unwrap();
        for (path, y) in [("libtorch", libtorch), ("host kernel", host)] {
            let diff = (&y - &golden).abs().max().double_value(&[]);
            assert!(diff <= bound, "{path}: max |ours - fairseq| {diff:.3e} beyond {bound:.3e}");
        }
    }
}
