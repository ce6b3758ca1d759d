//! `TransformerEncoderLayerBase` and `TransformerDecoderLayerBase`
//! (fairseq/modules/transformer_layer.py).

use tch::Tensor;

use super::attention::MultiheadAttention;
use super::incremental::LayerState;
use super::nn::{ActivationFn, LayerNorm, Linear};
use super::options::{DecoderOptions, EncDecOptions};
use super::weights::Weights;
use super::ModelError;

#[derive(Debug)]
pub struct TransformerEncoderLayer {
    pub self_attn: MultiheadAttention,
    pub self_attn_layer_norm: LayerNorm,
    pub fc1: Linear,
    pub fc2: Linear,
    pub final_layer_norm: LayerNorm,
    pub activation_fn: ActivationFn,
    pub normalize_before: bool,
    /// The layer's own copies for `torch._transformer_encoder_layer_fwd`, which fairseq fills
    /// from the q/k/v, out_proj, fc1 and fc2 weights whenever it loads a state dict.
    pub in_proj_weight: Tensor,
    pub in_proj_bias: Tensor,
}

impl TransformerEncoderLayer {
    pub(crate) fn load(w: &Weights, o: &EncDecOptions) -> Result<Self, ModelError> {
        let (embed_dim, ffn_embed_dim, num_heads) = (o.embed_dim, o.ffn_embed_dim, o.attention_heads);
        let self_attn = MultiheadAttention::load(&w.sub("self_attn"), embed_dim, embed_dim, num_heads)?;
        let self_attn_layer_norm = LayerNorm::load(&w.sub("self_attn_layer_norm"), embed_dim)?;
        let fc1 = Linear::load(&w.sub("fc1"), embed_dim, ffn_embed_dim, true)?;
        let fc2 = Linear::load(&w.sub("fc2"), ffn_embed_dim, embed_dim, true)?;
        let final_layer_norm = LayerNorm::load(&w.sub("final_layer_norm"), embed_dim)?;
        // TransformerEncoderLayerBase._load_from_state_dict overwrites these from the others
        // (the checkpoint upgrade derives them so; a state dict without them gets them here)
        let in_proj_weight = match w.get_opt("in_proj_weight", &[3 * embed_dim, embed_dim])? {
            Some(t) => t,
            None => {
                let t = Tensor::f_cat(&[&self_attn.q_proj.weight, &self_attn.k_proj.weight, &self_attn.v_proj.weight], 0)?;
                w.register("in_proj_weight", &t)?;
                t
            }
        };
        let in_proj_bias = match w.get_opt("in_proj_bias", &[3 * embed_dim])? {
            Some(t) => t,
            None => {
                let biases: Vec<&Tensor> =
                    [&self_attn.q_proj, &self_attn.k_proj, &self_attn.v_proj].iter().filter_map(|l| l.bias.as_ref()).collect();
                let t = Tensor::f_cat(&biases, 0)?;
                w.register("in_proj_bias", &t)?;
                t
            }
        };
        for (name, t) in [
            ("out_proj_weight", Some(&self_attn.out_proj.weight)),
            ("out_proj_bias", self_attn.out_proj.bias.as_ref()),
            ("fc1_weight", Some(&fc1.weight)),
            ("fc1_bias", fc1.bias.as_ref()),
            ("fc2_weight", Some(&fc2.weight)),
            ("fc2_bias", fc2.bias.as_ref()),
        ] {
            if let Some(t) = t {
                w.register(name, t)?;
            }
        }
        Ok(Self {
            self_attn,
            self_attn_layer_norm,
            fc1,
            fc2,
            final_layer_norm,
            activation_fn: o.activation_fn,
            normalize_before: o.normalize_before,
            in_proj_weight,
            in_proj_bias,
        })
    }

    /// fairseq's `can_use_fastpath`: post-norm, and the activation is `F.relu` (fairseq's
    /// `gelu` is its own function, not `F.gelu`, so it never qualifies). The remaining
    /// conditions (eval mode, loaded from a state dict, torch >= 1.12, equal LayerNorm eps)
    /// always hold for inference.
    pub fn can_use_fastpath(&self) -> bool {
        !self.normalize_before && self.activation_fn == ActivationFn::Relu
    }

    /// The regular path: `x` `[S, B, C]`, `encoder_padding_mask` `[B, S]` (only when the batch
    /// has padding).
    pub fn forward(&self, x: &Tensor, encoder_padding_mask: Option<&Tensor>) -> Result<Tensor, ModelError> {
        let residual = x;
        let mut x = if self.normalize_before { self.self_attn_layer_norm.forward(x)? } else { x.shallow_clone() };
        x = self.self_attn.forward_torch(&x, &x, encoder_padding_mask, None)?;
        x = residual_connection(residual, &x, &self.self_attn_layer_norm, self.normalize_before)?;
        feed_forward(&x, &self.fc1, &self.fc2, self.activation_fn, &self.final_layer_norm, self.normalize_before)
    }

    /// `torch._transformer_encoder_layer_fwd` as fairseq calls it: `x` batch-first `[B, S, C]`
    /// (or a nested tensor), `mask` `[B, S]` bool. reference/sitecustomize.py passes
    /// `mask_type=1` with a 2-D mask (torch 2.13 refuses the call without one).
    pub fn forward_fastpath(&self, x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor, ModelError> {
        let bias = |l: &Linear| {
            l.bias.as_ref().map(Tensor::shallow_clone).ok_or(ModelError::LinearWithoutBias)
        };
        let mask_type = mask.filter(|m| m.dim() == 2).map(|_| 1i64);
        let embed_dim = self.self_attn.embed_dim;
        Ok(Tensor::f_internal_transformer_encoder_layer_fwd(
            x,
            embed_dim,
            self.self_attn.num_heads,
            &self.in_proj_weight,
            &self.in_proj_bias,
            &self.self_attn.out_proj.weight,
            &bias(&self.self_attn.out_proj)?,
            false,
            false,
            self.self_attn_layer_norm.eps,
            &self.self_attn_layer_norm.weight,
            &self.self_attn_layer_norm.bias,
            &self.final_layer_norm.weight,
            &self.final_layer_norm.bias,
            &self.fc1.weight,
            &bias(&self.fc1)?,
            &self.fc2.weight,
            &bias(&self.fc2)?,
            mask,
            mask_type,
        )?)
    }
}

#[derive(Debug)]
pub struct TransformerDecoderLayer {
    pub self_attn: MultiheadAttention,
    pub self_attn_layer_norm: LayerNorm,
    /// None in a language model's decoder (`no_encoder_attn`).
    pub encoder_attn: Option<MultiheadAttention>,
    pub encoder_attn_layer_norm: Option<LayerNorm>,
    pub fc1: Linear,
    pub fc2: Linear,
    pub final_layer_norm: LayerNorm,
    pub activation_fn: ActivationFn,
    pub normalize_before: bool,
}

impl TransformerDecoderLayer {
    pub(crate) fn load(w: &Weights, o: &DecoderOptions) -> Result<Self, ModelError> {
        let (embed_dim, ffn_embed_dim, num_heads) = (o.side.embed_dim, o.side.ffn_embed_dim, o.side.attention_heads);
        let encoder_embed_dim = o.encoder_embed_dim;
        let (activation_fn, normalize_before) = (o.side.activation_fn, o.side.normalize_before);
        Ok(Self {
            self_attn: MultiheadAttention::load(&w.sub("self_attn"), embed_dim, embed_dim, num_heads)?,
            self_attn_layer_norm: LayerNorm::load(&w.sub("self_attn_layer_norm"), embed_dim)?,
            encoder_attn: match o.no_encoder_attn {
                true => None,
                false => Some(MultiheadAttention::load(&w.sub("encoder_attn"), embed_dim, encoder_embed_dim, num_heads)?),
            },
            encoder_attn_layer_norm: match o.no_encoder_attn {
                true => None,
                false => Some(LayerNorm::load(&w.sub("encoder_attn_layer_norm"), embed_dim)?),
            },
            fc1: Linear::load(&w.sub("fc1"), embed_dim, ffn_embed_dim, true)?,
            fc2: Linear::load(&w.sub("fc2"), ffn_embed_dim, embed_dim, true)?,
            final_layer_norm: LayerNorm::load(&w.sub("final_layer_norm"), embed_dim)?,
            activation_fn,
            normalize_before,
        })
    }

    /// `x` `[T, B, C]`, `encoder_out` `[S, B, C_enc]` (None: a language model's layer),
    /// `encoder_padding_mask` `[B, S]`.
    /// With `state` the self-attention runs incrementally (fairseq's own path) and the encoder
    /// keys/values are computed once and cached; without, the self-attention takes
    /// `F.multi_head_attention_forward` with `self_attn_mask` (the future mask), or fairseq's
    /// own path when `torch_self_attention` is false.
    /// Returns the encoder-attention probabilities per head `[H, B, T, S]` (f32) when
    /// `need_head_weights`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        x: &Tensor,
        encoder_out: Option<&Tensor>,
        encoder_padding_mask: Option<&Tensor>,
        mut state: Option<&mut LayerState>,
        self_attn_mask: Option<&Tensor>,
        self_attn_padding_mask: Option<&Tensor>,
        need_head_weights: bool,
        torch_self_attention: bool,
    ) -> Result<(Tensor, Option<Tensor>), ModelError> {
        let residual = x;
        let mut x = if self.normalize_before { self.self_attn_layer_norm.forward(x)? } else { x.shallow_clone() };
        x = match state.as_deref_mut() {
            Some(s) if self.self_attn.fused.is_some() && self_attn_mask.is_none() && self_attn_padding_mask.is_none() => {
                self.self_attn.fused_self_attention_step(&x, &mut s.self_attn)?
            }
            Some(s) => {
                s.self_attn.host_cache_to_tensors()?;
                let (out, _) = self.self_attn.forward_fairseq(
                    &x,
                    None,
                    self_attn_padding_mask,
                    self_attn_mask,
                    Some(&mut s.self_attn),
                    false,
                    false,
                    false,
                )?;
                out
            }
            None if torch_self_attention => {
                self.self_attn.forward_torch(&x, &x, self_attn_padding_mask, self_attn_mask)?
            }
            None => {
                let (out, _) = self.self_attn.forward_fairseq(
                    &x,
                    None,
                    self_attn_padding_mask,
                    self_attn_mask,
                    None,
                    false,
                    false,
                    false,
                )?;
                out
            }
        };
        x = residual_connection(residual, &x, &self.self_attn_layer_norm, self.normalize_before)?;

        let (Some(encoder_attn), Some(encoder_attn_layer_norm), Some(encoder_out)) =
            (&self.encoder_attn, &self.encoder_attn_layer_norm, encoder_out)
        else {
            if self.encoder_attn.is_some() {
                return Err(ModelError::Input("a decoder layer with encoder attention needs the encoder's output".into()));
            }
            let x = feed_forward(&x, &self.fc1, &self.fc2, self.activation_fn, &self.final_layer_norm, self.normalize_before)?;
            return Ok((x, None));
        };
        let residual = x.shallow_clone();
        if self.normalize_before {
            x = encoder_attn_layer_norm.forward(&x)?;
        }
        let (out, attn) = match state {
            Some(s) if encoder_attn.fused.is_some() && !need_head_weights => {
                (encoder_attn.fused_encoder_attention_step(&x, encoder_out, encoder_padding_mask, &mut s.encoder_attn)?, None)
            }
            state => encoder_attn.forward_fairseq(
                &x,
                Some(encoder_out),
                encoder_padding_mask,
                None,
                state.map(|s| &mut s.encoder_attn),
                true,
                need_head_weights,
                need_head_weights,
            )?,
        };
        x = residual_connection(&residual, &out, encoder_attn_layer_norm, self.normalize_before)?;

        let x = feed_forward(&x, &self.fc1, &self.fc2, self.activation_fn, &self.final_layer_norm, self.normalize_before)?;
        Ok((x, attn))
    }
}

/// The residual feed-forward block both layer kinds end with: `fc2(activation(fc1(x)))` added to
/// `x`, with `final_layer_norm` before (pre-norm) or after (post-norm).
fn feed_forward(
    x: &Tensor,
    fc1: &Linear,
    fc2: &Linear,
    activation_fn: ActivationFn,
    final_layer_norm: &LayerNorm,
    normalize_before: bool,
) -> Result<Tensor, ModelError> {
    let h = if normalize_before { final_layer_norm.forward(x)? } else { x.shallow_clone() };
    let h = match activation_fn {
        ActivationFn::Relu => fc1.forward_relu(&h)?,
        other => other.forward(&fc1.forward(&h)?)?,
    };
    let h = fc2.forward(&h)?;
    residual_connection(x, &h, final_layer_norm, normalize_before)
}

/// `residual + x`, then `layer_norm` after it in a post-norm layer (in one pass on the host for
/// the fast compute types).
fn residual_connection(residual: &Tensor, x: &Tensor, layer_norm: &LayerNorm, normalize_before: bool) -> Result<Tensor, ModelError> {
    if normalize_before {
        return Ok(residual.f_add(x)?);
    }
    layer_norm.forward_residual(residual, x)
}
