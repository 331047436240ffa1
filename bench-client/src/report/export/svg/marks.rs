//! Labelled straight lines across a plot (an SLO, the capacity answer), and where their labels go.

use plotters::style::RGBColor;

use super::axis::{self, Axis, Unit};
use super::{legend, to_px, SLO_RED};

/// A labelled straight line across the plot: an SLO, the capacity answer.
pub(super) struct Mark {
    pub(super) at: MarkAt,
    pub(super) label: String,
    pub(super) color: RGBColor,
}

/// Where a mark's line lies.
#[derive(Clone, Copy)]
pub(super) enum MarkAt {
    /// Horizontal, at this y.
    Y(f64),
    /// Vertical, at this x.
    X(f64),
}

impl Mark {
    /// An SLO line labelled `TTFT SLO 200 ms`.
    pub(super) fn slo(at: MarkAt, metric: &str, ms: f64) -> Mark {
        Mark {
            at,
            label: format!("{metric} SLO {}", axis::tick_label(ms, Unit::Ms)),
            color: SLO_RED,
        }
    }
}

/// The box of a mark's label, in plot-area pixels, beside its line at pixel `pos` (x of a
/// vertical line, y of a horizontal one); the labels of vertical lines stack down from the top,
/// `i` being the line's index among them.
fn mark_label_box(w: f64, pos: f64, vertical: Option<usize>, label: &str) -> legend::Rect {
    let tw = label.chars().count() as f64 * MARK_CHAR_PX;
    match vertical {
        Some(i) => {
            let y0 = 4.0 + i as f64 * 15.0;
            let x0 = if pos + 4.0 + tw <= w {
                pos + 4.0
            } else {
                pos - 4.0 - tw
            };
            legend::Rect {
                x0,
                y0,
                x1: x0 + tw,
                y1: y0 + 13.0,
            }
        }
        None => {
            let y1 = if pos >= 18.0 { pos - 3.0 } else { pos + 16.0 };
            legend::Rect {
                x0: 4.0,
                y0: y1 - 13.0,
                x1: 4.0 + tw,
                y1,
            }
        }
    }
}

/// Mark labels: as legend text, 12 px (9.7 px in the SVG), a character at most this wide.
const MARK_CHAR_PX: f64 = 6.2;

/// A mark as drawn: its line's pixel position and its label's box.
pub(super) struct PlacedMark<'m> {
    pub(super) mark: &'m Mark,
    /// x of a vertical line, y of a horizontal one, plot-area pixels.
    pub(super) pos: f64,
    pub(super) label_box: legend::Rect,
}

/// Where each mark goes; marks outside the axes are left out.
pub(super) fn place_marks<'m>(
    dims: (f64, f64),
    x_norm: &dyn Fn(f64) -> f64,
    y: &Axis,
    marks: &'m [Mark],
) -> Vec<PlacedMark<'m>> {
    let mut vertical = 0;
    let mut out = Vec::new();
    for m in marks {
        let (pos, v) = match m.at {
            MarkAt::X(x) => (to_px(dims, (x_norm(x), 0.0)).0, true),
            MarkAt::Y(v) => match y.norm(v) {
                Some(n) => (to_px(dims, (0.0, n)).1, false),
                None => continue,
            },
        };
        let limit = if v { dims.0 } else { dims.1 };
        if !(0.0..=limit).contains(&pos) {
            continue;
        }
        let label_box = mark_label_box(dims.0, pos, v.then_some(vertical), &m.label);
        if v {
            vertical += 1;
        }
        out.push(PlacedMark {
            mark: m,
            pos,
            label_box,
        });
    }
    out
}
