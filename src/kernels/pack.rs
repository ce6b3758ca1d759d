//! Weights into the panels the host kernels read: each panel holds [`PANEL`] output columns, one
//! [`Line`] per input (or input pair), packed once at load on the intra-op threads.

use super::panel::{Line, PANEL};
use crate::libtorch::parallel::parallel_for;

/// Packing below this many bytes of panels stays on one thread.
const PACK_GRAIN_BYTES: usize = 1 << 18;

/// `w` `[out, in]` as `panel_count` panels of `in` lines, the columns past `out` zero.
pub(super) fn pack_f32(w: &[f32], out_features: usize, in_features: usize, panel_count: usize) -> Vec<Line> {
    pack_panels(panel_count, in_features, |p, panel| {
        for (c, row) in panel_rows(w, out_features, in_features, p).enumerate() {
            for (line, &v) in panel.iter_mut().zip(row) {
                line.0[c] = v;
            }
        }
    })
}

/// The rows of `w` `[out, in]` (row-major) that panel `p` holds, one a lane: [`PANEL`] of them,
/// fewer in the last panel, none past the weight or without inputs.
pub(super) fn panel_rows(w: &[f32], out_features: usize, in_features: usize, p: usize) -> std::slice::ChunksExact<'_, f32> {
    let first = (p * PANEL).min(out_features);
    let end = (first + PANEL).min(out_features);
    w[first * in_features..end * in_features].chunks_exact(in_features.max(1))
}

/// `panel_count` panels of `lines` lines each, panel `p` zeroed and then filled by `fill(p, panel)`,
/// shared out among the threads: the pages of a large weight's panels are first touched (and
/// faulted in) on both cores, and each panel is written while it is in this core's cache.
pub(super) fn pack_panels(panel_count: usize, lines: usize, fill: impl Fn(usize, &mut [Line]) + Sync) -> Vec<Line> {
    struct SharedLines(*mut Line);
    // SAFETY: each range writes only its own panels' lines.
    unsafe impl Sync for SharedLines {}
    let total = panel_count * lines;
    let mut panels: Vec<Line> = Vec::with_capacity(total);
    let out = SharedLines(panels.as_mut_ptr());
    let panel_bytes = (lines * std::mem::size_of::<Line>()).max(1);
    parallel_for(panel_count, PACK_GRAIN_BYTES.div_ceil(panel_bytes), |p0, p1| {
        let out = &out;
        for p in p0..p1 {
            // SAFETY: panel `p`'s lines lie below `total`, the capacity, and only this range
            // touches them; all-zero bytes are a valid `Line`.
            let panel = unsafe {
                let first = out.0.add(p * lines);
                std::ptr::write_bytes(first, 0, lines);
                std::slice::from_raw_parts_mut(first, lines)
            };
            fill(p, panel);
        }
    });
    // SAFETY: the ranges above wrote every line below `total`.
    unsafe { panels.set_len(total) };
    panels
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weight `(o, i)` is lane `o % 16` of line `i` of panel `o / 16`; the lanes past the last
    /// output and the panels past the weight are zero.
    #[test]
    fn each_weight_lies_in_its_panel_line_and_lane_with_zeros_past_the_end() {
        let (out_features, in_features, panel_count) = (37, 5, 4);
        let w: Vec<f32> = (0..out_features * in_features).map(|k| k as f32 + 1.0).collect();
        let panels = pack_f32(&w, out_features, in_features, panel_count);
        assert_eq!(panels.len(), panel_count * in_features);
        for p in 0..panel_count {
            for i in 0..in_features {
                for c in 0..PANEL {
                    let o = p * PANEL + c;
                    let want = if o < out_features { w[o * in_features + i] } else { 0.0 };
                    assert_eq!(panels[p * in_features + i].0[c], want, "panel {p}, line {i}, lane {c}");
                }
            }
        }
    }

    /// A weight without inputs packs into no lines (nothing to fill), in float32 and in bfloat16.
    #[test]
    fn a_weight_without_inputs_packs_into_no_lines() {
        assert!(pack_f32(&[], 40, 0, 4).is_empty());
        assert!(super::super::gemm_bf16::pack(&[], 40, 0, 4).is_empty());
    }

    /// Panels are filled in ranges on the intra-op threads; every panel gets its own index.
    #[test]
    fn every_panel_is_filled_once_with_its_own_index() {
        let lines = 4096;
        let panels = pack_panels(64, lines, |p, panel| {
            assert!(panel.iter().all(|l| l.0 == [0.0; PANEL]), "panel {p} starts from zeros");
            for (i, line) in panel.iter_mut().enumerate() {
                line.0[0] = p as f32;
                line.0[1] = i as f32;
            }
        });
        for (k, line) in panels.iter().enumerate() {
            assert_eq!((line.0[0], line.0[1]), ((k / lines) as f32, (k % lines) as f32));
        }
    }
}
