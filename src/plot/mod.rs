//! "Look inside": attention heatmaps and positional-embedding plots.
//!
//! [`capture`] reads the numbers out of a [`crate::model::TransformerModel`], [`positions`] the
//! positional-embedding table, and [`render`] draws labelled heatmaps as SVG (vector text, no
//! fonts needed) or PNG (text rasterized from a TrueType font read at run time).

pub mod capture;
pub mod positions;
pub mod render;

pub use capture::{capture_attention, AttentionKind, AttentionMaps};
pub use render::{Axis, Heatmap, ImageFormat, Scale};

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("model: {0}")]
    Model(#[from] crate::model::ModelError),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    #[error("{0}")]
    Input(String),
    #[error("drawing: {0}")]
    Draw(String),
    #[error("{path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
    #[error("internal error: {0}")]
    Internal(String),
}
