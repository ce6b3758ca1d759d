//! `tchseq positions`: the positional-embedding table as a heatmap (position x dimension).

use std::io::{self, Write};

use anyhow::Result;

use super::args::{GlobalArgs, PositionsArgs, PositionsSide};
use super::common;
use super::Outcome;
use tchseq::plot::positions::{positional_table, Side};
use tchseq::plot::render::{render, Axis, Figure, Heatmap, ImageFormat, Scale};

pub fn run(global: &GlobalArgs, a: &PositionsArgs) -> Result<Outcome> {
    let format = ImageFormat::from_path(&a.output)?;
    let loaded = common::load_single(global, &a.model, None, tch::Kind::Float)?;
    let side = match a.side {
        PositionsSide::Encoder => Side::Encoder,
        PositionsSide::Decoder => Side::Decoder,
    };
    let (values, learned) = positional_table(&loaded.models[0], side, a.length)?;
    let dims = values.first().map_or(0, Vec::len);
    let (min, max) = values.iter().flatten().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let tick = |n: usize, target: usize| [1, 2, 5, 10, 20, 25, 50, 100, 128, 256].into_iter().find(|&k| n / k <= target).unwrap_or(n.max(1));
    let side_name = match side {
        Side::Encoder => "encoder",
        Side::Decoder => "decoder",
    };
    let figure = Figure {
        title: format!(
            "{} positional embeddings ({side_name}.embed_positions), {} positions x {dims} dimensions",
            if learned { "learned" } else { "sinusoidal" },
            values.len()
        ),
        panels: vec![Heatmap {
            title: String::new(),
            rows: Axis::Index { start: 0, every: tick(values.len(), 12) },
            cols: Axis::Index { start: 0, every: tick(dims, 10) },
            values,
            row_title: "position".into(),
            col_title: "dimension".into(),
        }],
        columns: 1,
        scale: Scale { min, max: if max > min { max } else { min + 1.0 }, label: "value".into() },
    };
    let (w, h) = render(&figure, &a.output, format, a.font.as_deref())?;
    writeln!(io::stdout().lock(), "wrote {} ({w}x{h} px)", a.output.display())?;
    Ok(Outcome::Ok)
}
