//! Labelled heatmaps with a colour bar, drawn with `plotters` on its SVG or bitmap backend.
//!
//! The layout is computed here (cell sizes, label areas from an estimated glyph width) so that
//! both backends place everything alike and the SVG needs no font to be laid out.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::PlotError;

/// Output file type, from the file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Svg,
    Png,
}

impl ImageFormat {
    pub fn from_path(path: &Path) -> Result<Self, PlotError> {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Self::Svg),
            Some("png") => Ok(Self::Png),
            _ => Err(PlotError::Input(format!(
                "{}: the output file must end in .svg or .png",
                path.display()
            ))),
        }
    }
}

/// What an axis shows next to its cells.
#[derive(Debug, Clone)]
pub enum Axis {
    /// One label per cell (tokens).
    Tokens(Vec<String>),
    /// Cell indices `start..`, labelled every `every` cells.
    Index { start: usize, every: usize },
}

/// The colour scale shared by every panel of a figure.
#[derive(Debug, Clone)]
pub struct Scale {
    pub min: f32,
    pub max: f32,
    pub label: String,
}

/// One panel: `values[row][col]`.
#[derive(Debug, Clone)]
pub struct Heatmap {
    pub title: String,
    pub values: Vec<Vec<f32>>,
    pub rows: Axis,
    pub cols: Axis,
    pub row_title: String,
    pub col_title: String,
}

/// Panels laid out in a grid of `columns`, under a title, with one colour bar.
#[derive(Debug, Clone)]
pub struct Figure {
    pub title: String,
    pub panels: Vec<Heatmap>,
    pub columns: usize,
    pub scale: Scale,
}

const FONT: &str = "sans-serif";
const TITLE_SIZE: u32 = 16;
const LABEL_SIZE: u32 = 12;
const AXIS_TITLE_SIZE: u32 = 13;
/// Longest token label drawn in full; longer ones are cut with an ellipsis.
const MAX_LABEL_CHARS: usize = 24;
/// Above this many cells a panel body is drawn as one image instead of one rectangle per cell.
const MAX_VECTOR_CELLS: usize = 2500;
const MARGIN: u32 = 12;
const COLORBAR_WIDTH: u32 = 110;

/// Estimated width of `text` in pixels at `size` (sans-serif averages about 0.6 em).
fn text_width(text: &str, size: u32) -> u32 {
    (text.chars().count() as f64 * f64::from(size) * 0.62).ceil() as u32
}

fn shorten(label: &str) -> String {
    if label.chars().count() > MAX_LABEL_CHARS {
        let mut s: String = label.chars().take(MAX_LABEL_CHARS - 1).collect();
        s.push('…');
        s
    } else {
        label.to_string()
    }
}

impl Axis {
    fn labels(&self, n: usize) -> Vec<(usize, String)> {
        match self {
            Axis::Tokens(t) => t.iter().take(n).map(|s| shorten(s)).enumerate().collect(),
            Axis::Index { start, every } => {
                (0..n).filter(|i| i % (*every).max(1) == 0).map(|i| (i, (start + i).to_string())).collect()
            }
        }
    }

    /// Pixels per cell along this axis for `n` cells.
    fn cell(&self, n: usize) -> u32 {
        let n = n.max(1) as u32;
        match self {
            // room for a 12 px label per cell, smaller cells only for long sequences
            Axis::Tokens(_) => (1400 / n).clamp(14, 26),
            Axis::Index { .. } => (900 / n).clamp(1, 20),
        }
    }
}

/// Pixel geometry of one panel (relative to its own top-left corner).
struct PanelLayout {
    rows: usize,
    cols: usize,
    cell_w: u32,
    cell_h: u32,
    title_h: u32,
    left: u32,
    bottom: u32,
    width: u32,
    height: u32,
    col_labels_rotated: bool,
}

fn panel_layout(h: &Heatmap) -> Result<PanelLayout, PlotError> {
    let rows = h.values.len();
    let cols = h.values.first().map_or(0, Vec::len);
    if rows == 0 || cols == 0 {
        return Err(PlotError::Input("nothing to draw: the matrix is empty".into()));
    }
    if h.values.iter().any(|r| r.len() != cols) {
        return Err(PlotError::Internal("ragged heatmap rows".into()));
    }
    for (axis, n) in [(&h.rows, rows), (&h.cols, cols)] {
        if let Axis::Tokens(t) = axis {
            if t.len() != n {
                return Err(PlotError::Internal(format!("{} labels for {n} cells", t.len())));
            }
        }
    }
    let cell_w = h.cols.cell(cols);
    let cell_h = h.rows.cell(rows);
    let widest = |labels: &[(usize, String)]| labels.iter().map(|(_, s)| text_width(s, LABEL_SIZE)).max().unwrap_or(0);
    let row_labels = h.rows.labels(rows);
    let col_labels = h.cols.labels(cols);
    let col_labels_rotated = matches!(h.cols, Axis::Tokens(_));
    let left = widest(&row_labels) + 8 + AXIS_TITLE_SIZE + 10;
    let col_label_h = if col_labels_rotated { widest(&col_labels) } else { LABEL_SIZE };
    let bottom = col_label_h + 8 + AXIS_TITLE_SIZE + 10;
    let title_h = if h.title.is_empty() { 4 } else { TITLE_SIZE + 10 };
    let width = left + cell_w * cols as u32 + MARGIN;
    let height = title_h + cell_h * rows as u32 + bottom;
    Ok(PanelLayout { rows, cols, cell_w, cell_h, title_h, left, bottom, width, height, col_labels_rotated })
}

/// The whole figure's geometry.
struct FigureLayout {
    panels: Vec<PanelLayout>,
    columns: usize,
    panel: (u32, u32),
    title_h: u32,
    width: u32,
    height: u32,
}

fn figure_layout(figure: &Figure) -> Result<FigureLayout, PlotError> {
    if figure.panels.is_empty() {
        return Err(PlotError::Input("nothing to draw".into()));
    }
    let panels = figure.panels.iter().map(panel_layout).collect::<Result<Vec<_>, _>>()?;
    let columns = figure.columns.clamp(1, figure.panels.len());
    let panel_w = panels.iter().map(|l| l.width).max().unwrap_or(0);
    let panel_h = panels.iter().map(|l| l.height).max().unwrap_or(0);
    let grid_rows = figure.panels.len().div_ceil(columns) as u32;
    let title_h = TITLE_SIZE + 2 * MARGIN;
    let width = MARGIN + panel_w * columns as u32 + COLORBAR_WIDTH;
    let width = width.max(text_width(&figure.title, TITLE_SIZE) + 2 * MARGIN);
    let height = title_h + panel_h * grid_rows + MARGIN;
    let height = height.max(title_h + 220);
    Ok(FigureLayout { panels, columns, panel: (panel_w, panel_h), title_h, width, height })
}

fn draw_err(e: &dyn std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Draws `figure` into `path` and returns the image size in pixels. PNG text needs a
/// TrueType font: `font`, or the first of a few usual system paths.
pub fn render(figure: &Figure, path: &Path, format: ImageFormat, font: Option<&Path>) -> Result<(u32, u32), PlotError> {
    let l = figure_layout(figure)?;
    let (width, height) = (l.width, l.height);
    match format {
        ImageFormat::Svg => {
            let root = SVGBackend::new(path, (width, height)).into_drawing_area();
            draw_figure(&root, figure, &l.panels, l.panel, l.columns, l.title_h)?;
            root.present().map_err(|e| draw_err(&e))?;
        }
        ImageFormat::Png => {
            register_font(font)?;
            let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
            draw_figure(&root, figure, &l.panels, l.panel, l.columns, l.title_h)?;
            root.present().map_err(|e| draw_err(&e))?;
        }
    }
    // plotters reports some write errors only by leaving no file behind
    match std::fs::metadata(path) {
        Ok(m) if m.len() > 0 => Ok((width, height)),
        Ok(_) => Err(PlotError::Draw(format!("{}: nothing was written", path.display()))),
        Err(source) => Err(PlotError::Io { path: path.to_path_buf(), source }),
    }
}

/// Draws `figure` as SVG text (for the server's web page).
pub fn render_svg(figure: &Figure) -> Result<String, PlotError> {
    let l = figure_layout(figure)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (l.width, l.height)).into_drawing_area();
        draw_figure(&root, figure, &l.panels, l.panel, l.columns, l.title_h)?;
        root.present().map_err(|e| draw_err(&e))?;
    }
    Ok(svg)
}

/// Usual places of a sans-serif TrueType font.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// Why PNG labels have no font.
#[derive(Debug, Clone, thiserror::Error)]
enum FontError {
    #[error("PNG labels need a TrueType font and none was found in the usual places; pass --font FILE.ttf or write .svg")]
    NotFound,
    #[error("reading font {}: {message}", path.display())]
    Read { path: std::path::PathBuf, message: String },
    #[error("{}: not a TrueType/OpenType font", .0.display())]
    NotAFont(std::path::PathBuf),
}

/// plotters draws bitmap text from a font registered once per process.
fn register_font(font: Option<&Path>) -> Result<(), PlotError> {
    static REGISTERED: OnceLock<Result<(), FontError>> = OnceLock::new();
    let result = REGISTERED.get_or_init(|| {
        let path = match font {
            Some(p) => p.to_path_buf(),
            None => FONT_CANDIDATES.iter().map(Path::new).find(|p| p.is_file()).map(Path::to_path_buf).ok_or(FontError::NotFound)?,
        };
        let bytes = std::fs::read(&path).map_err(|e| FontError::Read { path: path.clone(), message: e.to_string() })?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FONT, FontStyle::Normal, bytes)
            .map_err(|_| FontError::NotAFont(path.clone()))
    });
    result.clone().map_err(|e| PlotError::Input(e.to_string()))
}

fn color(v: f32, scale: &Scale) -> RGBColor {
    if !v.is_finite() {
        return RGBColor(200, 200, 200);
    }
    let (lo, hi) = (scale.min, scale.max);
    let h = if hi > lo { ((v - lo) / (hi - lo)).clamp(0.0, 1.0) } else { 0.5 };
    ViridisRGB.get_color(h)
}

fn draw_figure<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    figure: &Figure,
    layouts: &[PanelLayout],
    (panel_w, panel_h): (u32, u32),
    columns: usize,
    title_h: u32,
) -> Result<(), PlotError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| PlotError::Draw(e.to_string());
    root.fill(&WHITE).map_err(e)?;
    let title_style = TextStyle::from((FONT, TITLE_SIZE).into_font()).color(&BLACK).pos(Pos::new(HPos::Left, VPos::Top));
    root.draw_text(&figure.title, &title_style, (MARGIN as i32, MARGIN as i32)).map_err(e)?;
    for (i, (panel, layout)) in figure.panels.iter().zip(layouts).enumerate() {
        let x0 = MARGIN + (i % columns) as u32 * panel_w;
        let y0 = title_h + (i / columns) as u32 * panel_h;
        draw_panel(root, panel, layout, (x0 as i32, y0 as i32), &figure.scale)?;
    }
    let bar_x = (MARGIN + panel_w * columns as u32 + 14) as i32;
    let first = &layouts[0];
    let bar_top = (title_h + first.title_h) as i32;
    let bar_h = (first.cell_h * first.rows as u32).clamp(120, 320) as i32;
    draw_colorbar(root, &figure.scale, (bar_x, bar_top), bar_h)
}

fn draw_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    h: &Heatmap,
    l: &PanelLayout,
    (x0, y0): (i32, i32),
    scale: &Scale,
) -> Result<(), PlotError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| PlotError::Draw(e.to_string());
    let (cw, ch) = (l.cell_w as i32, l.cell_h as i32);
    let gx = x0 + l.left as i32;
    let gy = y0 + l.title_h as i32;
    let grid_w = cw * l.cols as i32;
    let grid_h = ch * l.rows as i32;
    if !h.title.is_empty() {
        let style = TextStyle::from((FONT, AXIS_TITLE_SIZE).into_font()).color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
        root.draw_text(&h.title, &style, (gx + grid_w / 2, y0 + 2)).map_err(e)?;
    }
    if l.rows * l.cols <= MAX_VECTOR_CELLS {
        for (r, row) in h.values.iter().enumerate() {
            for (c, &v) in row.iter().enumerate() {
                let (x, y) = (gx + c as i32 * cw, gy + r as i32 * ch);
                root.draw(&Rectangle::new([(x, y), (x + cw, y + ch)], color(v, scale).filled())).map_err(e)?;
            }
        }
    } else {
        let (w, hgt) = (grid_w as usize, grid_h as usize);
        let mut buf = vec![0u8; w * hgt * 3];
        for (py, line) in buf.chunks_mut(w * 3).enumerate() {
            let row = &h.values[py / l.cell_h as usize];
            for (px, pixel) in line.chunks_mut(3).enumerate() {
                let RGBColor(r, g, b) = color(row[px / l.cell_w as usize], scale);
                pixel.copy_from_slice(&[r, g, b]);
            }
        }
        let image = BitMapElement::with_owned_buffer((gx, gy), (grid_w as u32, grid_h as u32), buf)
            .ok_or_else(|| PlotError::Internal("bitmap buffer size".into()))?;
        root.draw(&image).map_err(e)?;
    }
    root.draw(&Rectangle::new([(gx, gy), (gx + grid_w, gy + grid_h)], BLACK.stroke_width(1))).map_err(e)?;

    let label = TextStyle::from((FONT, LABEL_SIZE).into_font()).color(&BLACK);
    let tick = |a: (i32, i32), b: (i32, i32)| root.draw(&PathElement::new(vec![a, b], BLACK.stroke_width(1)));
    for (r, text) in h.rows.labels(l.rows) {
        let y = gy + r as i32 * ch + ch / 2;
        tick((gx - 4, y), (gx, y)).map_err(e)?;
        root.draw_text(&text, &label.pos(Pos::new(HPos::Right, VPos::Center)), (gx - 6, y)).map_err(e)?;
    }
    for (c, text) in h.cols.labels(l.cols) {
        let x = gx + c as i32 * cw + cw / 2;
        tick((x, gy + grid_h), (x, gy + grid_h + 4)).map_err(e)?;
        if l.col_labels_rotated {
            let style = label.transform(FontTransform::Rotate270).pos(Pos::new(HPos::Right, VPos::Center));
            root.draw_text(&text, &style, (x, gy + grid_h + 6)).map_err(e)?;
        } else {
            let style = label.pos(Pos::new(HPos::Center, VPos::Top));
            root.draw_text(&text, &style, (x, gy + grid_h + 6)).map_err(e)?;
        }
    }
    let axis = TextStyle::from((FONT, AXIS_TITLE_SIZE).into_font()).color(&RGBColor(60, 60, 60));
    let bottom = gy + grid_h + l.bottom as i32 - 4;
    root.draw_text(&h.col_title, &axis.pos(Pos::new(HPos::Center, VPos::Bottom)), (gx + grid_w / 2, bottom)).map_err(e)?;
    let style = axis.transform(FontTransform::Rotate270).pos(Pos::new(HPos::Center, VPos::Top));
    root.draw_text(&h.row_title, &style, (x0 + 2, gy + grid_h / 2)).map_err(e)?;
    Ok(())
}

fn draw_colorbar<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    scale: &Scale,
    (x, top): (i32, i32),
    height: i32,
) -> Result<(), PlotError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| PlotError::Draw(e.to_string());
    const STEPS: i32 = 64;
    let width = 16;
    for s in 0..STEPS {
        let y1 = top + height - s * height / STEPS;
        let y0 = top + height - (s + 1) * height / STEPS;
        let v = scale.min + (scale.max - scale.min) * (s as f32 + 0.5) / STEPS as f32;
        root.draw(&Rectangle::new([(x, y0), (x + width, y1)], color(v, scale).filled())).map_err(e)?;
    }
    root.draw(&Rectangle::new([(x, top), (x + width, top + height)], BLACK.stroke_width(1))).map_err(e)?;
    let range = (scale.max - scale.min).abs();
    let decimals = if range >= 10.0 { 1 } else if range >= 0.1 { 2 } else { 4 };
    let label = TextStyle::from((FONT, LABEL_SIZE).into_font()).color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    for k in 0..=4 {
        let v = scale.min + (scale.max - scale.min) * k as f32 / 4.0;
        let y = top + height - k * height / 4;
        root.draw(&PathElement::new(vec![(x + width, y), (x + width + 4, y)], BLACK.stroke_width(1))).map_err(e)?;
        root.draw_text(&format!("{v:.decimals$}"), &label, (x + width + 6, y)).map_err(e)?;
    }
    let axis = TextStyle::from((FONT, AXIS_TITLE_SIZE).into_font())
        .color(&RGBColor(60, 60, 60))
        .transform(FontTransform::Rotate270)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    root.draw_text(&scale.label, &axis, (x + width + 78, top + height / 2)).map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heatmap(n: usize) -> Heatmap {
        let toks: Vec<String> = (0..n).map(|i| format!("tok{i}@@")).collect();
        Heatmap {
            title: "t".into(),
            values: (0..n).map(|r| (0..n).map(|c| (r * n + c) as f32).collect()).collect(),
            rows: Axis::Tokens(toks.clone()),
            cols: Axis::Tokens(toks),
            row_title: "rows".into(),
            col_title: "cols".into(),
        }
    }

    #[test]
    fn format_from_extension() {
        assert_eq!(ImageFormat::from_path(Path::new("a/b.SVG")).unwrap(), ImageFormat::Svg);
        assert_eq!(ImageFormat::from_path(Path::new("x.png")).unwrap(), ImageFormat::Png);
        assert!(ImageFormat::from_path(Path::new("x.jpg")).is_err());
        assert!(ImageFormat::from_path(Path::new("x")).is_err());
    }

    #[test]
    fn long_labels_are_cut() {
        let long = "x".repeat(40);
        let s = shorten(&long);
        assert_eq!(s.chars().count(), MAX_LABEL_CHARS);
        assert!(s.ends_with('…'));
        assert_eq!(shorten("abc"), "abc");
    }

    #[test]
    fn layout_grows_with_tokens() {
        let small = panel_layout(&heatmap(3)).unwrap();
        let large = panel_layout(&heatmap(30)).unwrap();
        assert!(large.width > small.width && large.height > small.height);
    }

    #[test]
    fn ragged_and_empty_matrices_are_refused() {
        let mut h = heatmap(3);
        h.values[1].pop();
        assert!(panel_layout(&h).is_err());
        let mut h = heatmap(3);
        h.values.clear();
        assert!(panel_layout(&h).is_err());
    }

    #[test]
    fn colors_follow_the_scale() {
        let s = Scale { min: 0.0, max: 1.0, label: String::new() };
        assert_eq!(color(0.0, &s), ViridisRGB.get_color(0.0));
        assert_eq!(color(2.0, &s), ViridisRGB.get_color(1.0));
        assert_eq!(color(f32::NAN, &s), RGBColor(200, 200, 200));
    }
}
