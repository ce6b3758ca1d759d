//! `TransformerModel`: the encoder and decoder built from one state dict.

use indexmap::IndexMap;
use tch::{Device, Kind, Tensor};

use super::decoder::TransformerDecoder;
use super::embedding::SharedTable;
use super::encoder::TransformerEncoder;
use crate::kernels::gemm::Precision;
use crate::config::ComputeType;
use super::nn::{LayerNorm, Linear};
use super::options::{DecoderOptions, EncDecOptions};
use super::weights::{LoadReport, StateDict};
use super::ModelError;
use crate::config::TransformerConfig;

/// From this size on, a tied output projection computes from the embedding table as it is
/// (`kernels/gemm_nt.rs`) rather than from packed panels.
const TABLE_BYTES: usize = 64 << 20;

#[derive(Debug)]
pub struct TransformerModel {
    pub cfg: TransformerConfig,
    pub encoder: TransformerEncoder,
    pub decoder: TransformerDecoder,
    /// Every tensor under its fairseq `state_dict()` name, as the model uses it (for `verify`).
    pub named_tensors: IndexMap<String, Tensor>,
    pub device: Device,
    pub kind: Kind,
}

impl TransformerModel {
    /// BART's `set_beam_size` (called by fairseq's `SequenceGenerator` for beams above 1): the
    /// encoder output is kept once per sentence and the encoder attention runs `einsum` over the
    /// beams. The exact compute type follows it for BART; on the CPU, the fused attention of the
    /// other compute types keeps its keys and values once per sentence for every model, as
    /// CTranslate2 does (a beam's rows of them are copies): a fifth of the memory at beam 5, and
    /// of the products that make them.
    pub fn beamable_encoder_attention(&self) -> bool {
        let encoder_attentions = || self.decoder.layers.iter().filter_map(|l| l.encoder_attn.as_ref());
        if encoder_attentions().all(|a| a.fused.is_some()) {
            // on a GPU the fused step attends through libtorch, which would repeat them per step;
            // a fixed-shape step (`fixed_kv_cache`) keeps one row per beam there and here alike
            return self.device == Device::Cpu
                && !self.decoder.fixed_kv_cache
                && self.decoder.layers.iter().any(|l| l.encoder_attn.is_some());
        }
        crate::config::BART_ARCHS.contains(&self.cfg.arch.as_str()) && encoder_attentions().all(|a| a.fused.is_none())
    }

    /// Builds every module from the state dict (constructor tree = key tree); a missing key is
    /// an error, unused keys are reported. Weights are cast to `kind` on `device`.
    pub fn from_state_dict(
        cfg: &TransformerConfig,
        sd: &IndexMap<String, Tensor>,
        device: Device,
        kind: Kind,
    ) -> Result<(Self, LoadReport), ModelError> {
        let _guard = tch::no_grad_guard();
        super::check_model_kind(kind)?;
        let encoder_options = EncDecOptions::encoder(cfg)?;
        let decoder_options = DecoderOptions::new(cfg)?;

        let state = StateDict::new(sd, device, kind);
        // One nn.Parameter under several names: load_state_dict copies each name into it in
        // order, so the last one present is what fairseq computes with.
        if cfg.share_all_embeddings {
            state.tie(&["encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight"])?;
        } else if cfg.share_decoder_input_output_embed {
            state.tie(&["decoder.embed_tokens.weight", "decoder.output_projection.weight"])?;
        }
        let root = state.root();
        let (encoder, enc_warnings) = TransformerEncoder::load(&root.sub("encoder"), &encoder_options)?;
        let (decoder, dec_warnings) = TransformerDecoder::load(&root.sub("decoder"), &decoder_options)?;
        for w in enc_warnings.into_iter().chain(dec_warnings) {
            state.warn(w);
        }
        drop(root);
        let (report, named_tensors) = state.finish();
        let model = Self { cfg: cfg.clone(), encoder, decoder, named_tensors, device, kind };
        Ok((model, report))
    }

    /// Switches the model to `compute_type`. `float16` and `bfloat16` rebuild the model from its
    /// own tensors in that dtype (fairseq's `model.half()`). Every compute type but `exact` fuses
    /// the decoder's attention projections (`fused.rs`). On the CPU, `float32` computes the
    /// decoder's linear layers on the host from packed weights (`kernels/gemm.rs`), and `bfloat16`
    /// (with AVX512_BF16) does the same from bfloat16 panels (`kernels/gemm_bf16.rs`); `int8` quantizes
    /// every linear layer (the output projection too on the host's int8 kernel, with AVX2 or
    /// AVX-512 VNNI; through fbgemm it stays fp32, on the host), keeps the embeddings, norms and attention
    /// in fp32, and turns the encoder's fast path off, as that kernel takes the fp32 weights.
    pub fn set_compute_type(&mut self, compute_type: ComputeType) -> Result<(), ModelError> {
        let _guard = tch::no_grad_guard();
        match (compute_type, crate::kernels::compute_type::host_precision(compute_type, self.device)) {
            (ComputeType::Exact, _) => Ok(()),
            (c, _) if c.cpu_only() && self.device != Device::Cpu => Err(ModelError::CpuOnly { compute_type: c, device: self.device }),
            (_, Some(precision)) => {
                self.cast_for(compute_type)?;
                if precision == Precision::Bf16 {
                    self.round_weights_to_bfloat16()?;
                }
                self.pack_for_host(precision)
            }
            (ComputeType::Int8, None) => {
                self.fuse_attention_projections()?;
                self.quantize_to_int8()
            }
            // libtorch computes, with the weights in the compute type's dtype: float16 and
            // bfloat16 anywhere else, float32 on a GPU or a CPU without AVX2
            (ComputeType::Float32 | ComputeType::Float16 | ComputeType::BFloat16, None) => {
                self.cast_for(compute_type)?;
                self.fuse_attention_projections()
            }
        }
    }

    /// The model rebuilt from its own tensors in the dtype `compute_type` loads in here, where
    /// that is not the one it has (fairseq's `model.half()`).
    fn cast_for(&mut self, compute_type: ComputeType) -> Result<(), ModelError> {
        if let Some(kind) = crate::kernels::compute_type::load_kind(compute_type, self.device).filter(|&k| k != self.kind) {
            let allow_fastpath = self.encoder.allow_fastpath;
            (*self, _) = Self::from_state_dict(&self.cfg, &self.named_tensors, self.device, kind)?;
            self.encoder.allow_fastpath = allow_fastpath;
        }
        Ok(())
    }

    /// The decoder's attention projections fused (`fused.rs`): q, k and v in one product for the
    /// self-attention, k and v in one for the encoder attention.
    fn fuse_attention_projections(&mut self) -> Result<(), ModelError> {
        for l in &mut self.decoder.layers {
            l.self_attn.fuse_projections(true)?;
            if let Some(e) = l.encoder_attn.as_mut() {
                e.fuse_projections(false)?;
            }
        }
        Ok(())
    }

    /// `int8` on the CPU: every linear layer quantized, the embeddings, norms and attention in
    /// fp32.
    fn quantize_to_int8(&mut self) -> Result<(), ModelError> {
        self.encoder.allow_fastpath = false;
        let mut linears: Vec<&mut Linear> = Vec::new();
        for l in &mut self.encoder.layers {
            let a = &mut l.self_attn;
            linears.extend([&mut a.q_proj, &mut a.k_proj, &mut a.v_proj, &mut a.out_proj, &mut l.fc1, &mut l.fc2]);
        }
        for l in &mut self.decoder.layers {
            let a = &mut l.self_attn;
            linears.extend([&mut a.q_proj, &mut a.k_proj, &mut a.v_proj, &mut a.out_proj, &mut l.fc1, &mut l.fc2]);
            linears.extend(a.fused.as_mut().map(|f| f.linears_mut()).into_iter().flatten());
            if let Some(e) = l.encoder_attn.as_mut() {
                linears.extend([&mut e.q_proj, &mut e.k_proj, &mut e.v_proj, &mut e.out_proj]);
                linears.extend(e.fused.as_mut().map(|f| f.linears_mut()).into_iter().flatten());
            }
        }
        linears.extend(self.decoder.project_out_dim.as_mut());
        // as in float32, each weight is let go of once quantized (fbgemm's packed copy is the
        // one it computes with)
        self.named_tensors.clear();
        for (i, linear) in linears.into_iter().enumerate() {
            linear.quantize_int8()?;
            linear.release_weight();
            if i % 8 == 7 {
                crate::libtorch::return_freed_memory();
            }
        }
        for l in &mut self.encoder.layers {
            l.in_proj_weight = Tensor::new();
        }
        self.host_layer_norms()?;
        if crate::kernels::gemm_i8::PackedInt8::available() {
            // on the host's int8 kernel, the output projection too, and the embedding tables
            // quantized per row, as CTranslate2's int8 quantizes embeddings: a table tied to the
            // projection looks its rows up in the projection's columns
            self.decoder.output_projection.quantize_int8()?;
            if let Some(packed) = self.decoder.output_projection.packed_int8().cloned() {
                self.share_output_projection(&SharedTable::Int8(packed))?;
            }
            self.decoder.output_projection.release_weight();
            self.quantize_untied_embeddings()?;
        } else {
            self.host_output_projection(Precision::F32)?;
        }
        crate::libtorch::return_freed_memory();
        Ok(())
    }

    /// Every layer norm on the host (`kernels/norm.rs`), for `float32` and `int8` on the CPU.
    fn host_layer_norms(&mut self) -> Result<(), ModelError> {
        let (encoder, decoder) = (&mut self.encoder, &mut self.decoder);
        let mut norms: Vec<&mut LayerNorm> = Vec::new();
        for l in &mut encoder.layers {
            norms.extend([&mut l.self_attn_layer_norm, &mut l.final_layer_norm]);
        }
        for l in &mut decoder.layers {
            norms.extend([&mut l.self_attn_layer_norm, &mut l.final_layer_norm]);
            norms.extend(l.encoder_attn_layer_norm.as_mut());
        }
        norms.extend(encoder.layer_norm.as_mut().into_iter().chain(decoder.layer_norm.as_mut()));
        norms.extend(encoder.embedding.layernorm_embedding.as_mut().into_iter().chain(decoder.embedding.layernorm_embedding.as_mut()));
        norms.into_iter().try_for_each(LayerNorm::to_host)
    }

    /// `float32` on the CPU: every linear layer computes on the host from packed panels
    /// (`kernels/gemm.rs`), which are the one copy of its weight, and an output projection tied to
    /// the embedding table from the table itself (`kernels/gemm_nt.rs`). The encoder leaves its fast path, whose kernel
    /// takes libtorch's weights, and `named_tensors` lets go of them (`verify` runs `exact`, and
    /// no compute type follows another).
    /// fairseq's `--bf16` model for the host's bfloat16 panels (`kernels/gemm_bf16.rs`): every fp32
    /// weight rounded to bfloat16 in place, one at a time; the rest of the model then computes
    /// as `float32` does.
    fn round_weights_to_bfloat16(&mut self) -> Result<(), ModelError> {
        let _inference = crate::libtorch::InferenceMode::enter();
        for t in self.named_tensors.values_mut() {
            if t.kind() == Kind::Float {
                crate::checkpoint::own_storage(t).map_err(|e| ModelError::Torch(tch::TchError::Torch(e.0)))?;
                let rounded = t.f_to_kind(Kind::BFloat16)?;
                t.f_copy_(&rounded)?;
            }
        }
        Ok(())
    }

    fn pack_for_host(&mut self, precision: Precision) -> Result<(), ModelError> {
        // each weight is let go of as soon as it is packed, and the heap's free memory handed
        // back as it goes, so that loading never holds two copies of more than a layer (only
        // this model's modules hold them now)
        self.named_tensors.clear();
        self.encoder.allow_fastpath = false;
        for l in &mut self.encoder.layers {
            l.in_proj_weight = Tensor::new();
        }
        self.host_layer_norms()?;
        self.host_output_projection(precision)?;
        for l in &mut self.decoder.layers {
            l.self_attn.fuse_projections(true)?;
            l.self_attn.pack_fused_for_host(precision)?;
            if let Some(e) = l.encoder_attn.as_mut() {
                e.fuse_projections(false)?;
                e.pack_fused_for_host(precision)?;
            }
            for a in std::iter::once(&mut l.self_attn).chain(l.encoder_attn.as_mut()) {
                for linear in [&mut a.q_proj, &mut a.k_proj, &mut a.v_proj].into_iter().chain(a.fused.iter_mut().flat_map(|f| f.linears_mut())) {
                    linear.release_weight();
                }
            }
            crate::libtorch::return_freed_memory();
        }
        let mut packed = 0;
        self.for_each_linear(&mut |linear| {
            if linear.pack_for_host(precision)? {
                linear.release_weight();
                packed += 1;
                if packed % 8 == 0 {
                    crate::libtorch::return_freed_memory();
                }
            }
            Ok(())
        })?;
        crate::libtorch::return_freed_memory();
        Ok(())
    }

    /// The output projection on the host. One tied to the embedding table is held once for
    /// both: a large one computes from the table itself, as the embeddings look it up (packing it
    /// would hold two copies of the largest weight while it is made: 512 MB more at M2M-100's
    /// size); a smaller one is packed, faster for narrow models, and the embeddings look their
    /// rows up in the panels. In bfloat16 it is always packed: the panels are half the table.
    fn host_output_projection(&mut self, precision: Precision) -> Result<(), ModelError> {
        let projection = &mut self.decoder.output_projection;
        let output = projection.weight.data_ptr();
        let table_bytes = projection.weight.numel() * 4;
        let tied = |e: &super::embedding::Embedding| e.weight.data_ptr() == output;
        let tied_any = tied(&self.decoder.embedding.embed_tokens) || tied(&self.encoder.embedding.embed_tokens);
        let from_table = precision == Precision::F32 && tied_any && table_bytes >= TABLE_BYTES;
        if !(from_table && projection.compute_from_table()) && projection.pack_for_host(precision)? {
            if let Some(packed) = projection.packed().cloned() {
                self.share_output_projection(&SharedTable::Packed(packed))?;
            }
            self.decoder.output_projection.release_weight();
        }
        Ok(())
    }

    /// Each token embedding table not tied to the output projection, quantized per row for the
    /// host's int8 kernel and looked up there; one shared by the encoder and the decoder is
    /// quantized once.
    fn quantize_untied_embeddings(&mut self) -> Result<(), ModelError> {
        let (encoder, decoder) = (&mut self.encoder.embedding.embed_tokens, &mut self.decoder.embedding.embed_tokens);
        let shared = encoder.weight.defined() && decoder.weight.defined() && encoder.weight.data_ptr() == decoder.weight.data_ptr();
        let mut quantized = None;
        for embedding in [decoder, encoder] {
            if embedding.weight.defined() {
                let table = match (&quantized, shared) {
                    (Some(table), true) => SharedTable::clone(table),
                    _ => SharedTable::Int8(std::sync::Arc::new(crate::kernels::gemm_i8::PackedInt8::quantize(&embedding.weight, None)?)),
                };
                embedding.share_packed(table.clone())?;
                quantized = Some(table);
            }
        }
        Ok(())
    }

    /// Embedding tables tied to the output projection (before it lets go of its weight) look
    /// their rows up in `packed`, its packed or quantized copy, and let go of theirs.
    fn share_output_projection(&mut self, packed: &SharedTable) -> Result<(), ModelError> {
        let output = self.decoder.output_projection.weight.data_ptr();
        for embedding in [&mut self.decoder.embedding.embed_tokens, &mut self.encoder.embedding.embed_tokens] {
            if embedding.weight.defined() && embedding.weight.data_ptr() == output {
                embedding.share_packed(packed.clone())?;
            }
        }
        Ok(())
    }

    fn for_each_linear(&mut self, f: &mut dyn FnMut(&mut Linear) -> Result<(), ModelError>) -> Result<(), ModelError> {
        f(&mut self.decoder.output_projection)?;
        for l in [&mut self.decoder.project_out_dim, &mut self.decoder.embedding.project_in_dim, &mut self.encoder.embedding.project_in_dim] {
            if let Some(l) = l.as_mut() {
                f(l)?;
            }
        }
        for l in &mut self.encoder.layers {
            let a = &mut l.self_attn;
            for linear in [&mut a.q_proj, &mut a.k_proj, &mut a.v_proj, &mut a.out_proj, &mut l.fc1, &mut l.fc2] {
                f(linear)?;
            }
        }
        for l in &mut self.decoder.layers {
            for a in std::iter::once(&mut l.self_attn).chain(l.encoder_attn.as_mut()) {
                for linear in [&mut a.q_proj, &mut a.k_proj, &mut a.v_proj, &mut a.out_proj] {
                    f(linear)?;
                }
                for linear in a.fused.as_mut().map(|fused| fused.linears_mut()).into_iter().flatten() {
                    f(linear)?;
                }
            }
            f(&mut l.fc1)?;
            f(&mut l.fc2)?;
        }
        Ok(())
    }

    /// Whether a compute type other than `exact` runs (its decoder attention is fused), so that
    /// the generator may keep its bookkeeping on the host.
    pub fn fast_tier(&self) -> bool {
        self.decoder.layers.iter().all(|l| l.self_attn.fused.is_some()) && !self.decoder.layers.is_empty()
    }

    /// [`Self::fast_tier`] on the CPU, where the log-probs are read on the host too.
    pub fn fast_tier_on_cpu(&self) -> bool {
        self.device == Device::Cpu && self.fast_tier()
    }

    /// fairseq's `model.max_decoder_positions()`.
    pub fn max_decoder_positions(&self) -> usize {
        self.decoder.max_positions()
    }

    /// fairseq's `model.max_positions()[0]`.
    pub fn max_source_positions(&self) -> usize {
        self.encoder.max_positions()
    }

    /// fairseq's `model.max_positions()[1]`.
    pub fn max_target_positions(&self) -> usize {
        self.decoder.max_positions()
    }
}
