//! The host step's activations (`model/host_step.rs`), kept in the incremental state and reused
//! from step to step, so that a decoder step allocates nothing.

/// The step's activations, kept in the incremental state and reused from step to step.
#[derive(Debug, Default)]
pub struct HostStepBuffers {
    pub(crate) tokens: Vec<i64>,
    /// The layers' input and output `[rows, C]`.
    pub(crate) x: Vec<f32>,
    /// A norm's output, the input of the next product.
    pub(crate) h: Vec<f32>,
    /// A product's output before the residual.
    pub(crate) out: Vec<f32>,
    /// The self-attention's `[q·scaling; k; v]` `[rows, 3C]`.
    pub(crate) projected: Vec<f32>,
    /// The encoder attention's query `[rows, C]`: a buffer apart from `projected`, so that
    /// neither is zero-filled anew at every step as it grows back to its size.
    pub(crate) query: Vec<f32>,
    /// The attention's output `[rows, C]`.
    pub(crate) attn: Vec<f32>,
    /// fc1's output `[rows, F]`.
    pub(crate) ffn: Vec<f32>,
}
