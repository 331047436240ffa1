//! Where a panel's legend goes: the first corner of the plot area whose box holds no data (the
//! lines sampled every few pixels, the bands filled), preferring one that also misses the SLO and
//! capacity marks. When every corner holds data, the caller raises the y axis ([`headroom`]) so
//! the upper corners are free, and places again.

/// Legend text: 12 px sans-serif, which the SVG backend writes as 9.7 px; a character is at most
/// this wide (DejaVu Sans digits, 6.2 px, are the widest common ones; lower case averages 5.3).
const CHAR_PX: f64 = 6.2;
/// One legend row.
const ROW_PX: f64 = 16.0;
/// The line sample before each label.
pub const SWATCH_PX: f64 = 24.0;
/// Inside the box, around the rows.
pub const PAD_PX: f64 = 6.0;
/// Between the box and the plot area's edge.
const EDGE_PX: f64 = 6.0;
/// Obstacles are sampled at least this densely along lines, pixels.
pub const STEP_PX: f64 = 2.0;

/// The legend box of `labels`, width and height in pixels.
pub fn legend_size(labels: &[&str]) -> (f64, f64) {
    let chars = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    (
        2.0 * PAD_PX + SWATCH_PX + chars as f64 * CHAR_PX,
        2.0 * PAD_PX + labels.len() as f64 * ROW_PX,
    )
}

/// The height of one legend row, pixels.
pub fn row_px() -> f64 {
    ROW_PX
}

/// Where in the plot area a legend may sit, in the order tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corner {
    UpperRight,
    UpperLeft,
    LowerRight,
    LowerLeft,
    UpperMiddle,
    LowerMiddle,
}

const ORDER: [Corner; 6] = [
    Corner::UpperRight,
    Corner::UpperLeft,
    Corner::LowerRight,
    Corner::LowerLeft,
    Corner::UpperMiddle,
    Corner::LowerMiddle,
];

/// A box in plot-area pixels: x from the left edge, y from the top edge.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rect {
    pub x0: f64,
    pub y0: f64,
    pub x1: f64,
    pub y1: f64,
}

impl Rect {
    pub fn contains(&self, (x, y): (f64, f64)) -> bool {
        x >= self.x0 && x <= self.x1 && y >= self.y0 && y <= self.y1
    }
}

/// The box of a `size` legend at `c` of a `dims` plot area.
pub fn corner_box(c: Corner, (w, h): (f64, f64), (bw, bh): (f64, f64)) -> Rect {
    let x0 = match c {
        Corner::UpperRight | Corner::LowerRight => w - EDGE_PX - bw,
        Corner::UpperLeft | Corner::LowerLeft => EDGE_PX,
        Corner::UpperMiddle | Corner::LowerMiddle => (w - bw) / 2.0,
    };
    let y0 = match c {
        Corner::UpperRight | Corner::UpperLeft | Corner::UpperMiddle => EDGE_PX,
        _ => h - EDGE_PX - bh,
    };
    Rect {
        x0,
        y0,
        x1: x0 + bw,
        y1: y0 + bh,
    }
}

/// What a legend must not cover, in plot-area pixels.
#[derive(Debug, Default)]
pub struct Obstacles {
    /// Samples of the data: points, lines and bands.
    pub data: Vec<(f64, f64)>,
    /// Samples of the marks (SLO and capacity lines, their labels).
    pub marks: Vec<(f64, f64)>,
}

/// The first corner whose box holds no data sample, preferring, in the same order, one that also
/// holds no mark sample; `None` when every corner holds data.
pub fn place(dims: (f64, f64), size: (f64, f64), obs: &Obstacles) -> Option<(Corner, Rect)> {
    let free: Vec<(Corner, Rect, usize)> = ORDER
        .iter()
        .map(|&c| (c, corner_box(c, dims, size)))
        .filter(|(_, r)| !obs.data.iter().any(|p| r.contains(*p)))
        .map(|(c, r)| (c, r, obs.marks.iter().filter(|p| r.contains(**p)).count()))
        .collect();
    free.iter()
        .min_by_key(|(_, _, marks)| *marks)
        .map(|(c, r, _)| (*c, *r))
}

/// The share of a `dims` plot area's height a `size` legend needs at its top: the y axis raised
/// by this share leaves the upper corners free of data.
pub fn headroom((_, h): (f64, f64), (_, bh): (f64, f64)) -> f64 {
    ((bh + 2.0 * EDGE_PX) / h).min(0.9)
}

/// Samples along the polyline `pts`, at most [`STEP_PX`] apart.
pub fn polyline_samples(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = pts.first().copied().into_iter().collect();
    for w in pts.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        let n = ((x1 - x0).hypot(y1 - y0) / STEP_PX).ceil().max(1.0) as usize;
        out.extend((1..=n).map(|i| {
            let t = i as f64 / n as f64;
            (x0 + (x1 - x0) * t, y0 + (y1 - y0) * t)
        }));
    }
    out
}

/// Samples filling the band between the polylines `lower` and `upper`, point `i` of each at the
/// same x: every [`STEP_PX`] along x, the column between the two lines there.
pub fn band_samples(lower: &[(f64, f64)], upper: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let column = |out: &mut Vec<(f64, f64)>, x: f64, a: f64, b: f64| {
        let n = ((a - b).abs() / STEP_PX).ceil().max(1.0) as usize;
        out.extend((0..=n).map(|i| (x, a + (b - a) * i as f64 / n as f64)));
    };
    for (l, u) in lower.windows(2).zip(upper.windows(2)) {
        let n = ((l[1].0 - l[0].0).abs() / STEP_PX).ceil().max(1.0) as usize;
        for i in 0..=n {
            let t = i as f64 / n as f64;
            let x = l[0].0 + (l[1].0 - l[0].0) * t;
            let a = l[0].1 + (l[1].1 - l[0].1) * t;
            let b = u[0].1 + (u[1].1 - u[0].1) * t;
            column(&mut out, x, a, b);
        }
    }
    if let ([l], [u]) = (lower, upper) {
        column(&mut out, l.0, l.1, u.1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIMS: (f64, f64) = (460.0, 320.0);

    fn data(pts: &[(f64, f64)]) -> Obstacles {
        Obstacles {
            data: polyline_samples(pts),
            marks: Vec::new(),
        }
    }

    #[test]
    fn a_rising_line_leaves_the_upper_left_corner() {
        // The Kimi TTFT on a linear axis: flat along the bottom, then up to the top right corner.
        let line = [(10.0, 315.0), (300.0, 300.0), (400.0, 200.0), (455.0, 5.0)];
        let size = legend_size(&["TTFT p50 (band p10-p90)", "server: queue + prefill p50"]);
        let obs = data(&line);
        let (c, r) = place(DIMS, size, &obs).expect("a free corner");
        assert_eq!(c, Corner::UpperLeft);
        assert!(!obs.data.iter().any(|p| r.contains(*p)));
        // The upper right corner, tried first, holds the line's end.
        assert!(obs
            .data
            .iter()
            .any(|p| corner_box(Corner::UpperRight, DIMS, size).contains(*p)));
    }

    #[test]
    fn a_segment_between_points_counts_not_only_the_points() {
        // Two points outside the upper right box, the segment between them through it.
        let line = [(200.0, 10.0), (459.0, 60.0)];
        let size = (150.0, 44.0);
        assert!(!line
            .iter()
            .any(|p| corner_box(Corner::UpperRight, DIMS, size).contains(*p)));
        assert_ne!(
            place(DIMS, size, &data(&line)).unwrap().0,
            Corner::UpperRight
        );
    }

    #[test]
    fn a_band_counts_as_filled() {
        // A band from near the bottom to near the top over the whole width, edges outside every
        // box: only the band's inside is under the legend.
        let lower = [(0.0, 318.0), (460.0, 318.0)];
        let upper = [(0.0, 2.0), (460.0, 2.0)];
        let obs = Obstacles {
            data: band_samples(&lower, &upper),
            marks: Vec::new(),
        };
        assert_eq!(place(DIMS, (120.0, 40.0), &obs), None);
    }

    #[test]
    fn a_band_is_filled_along_its_whole_length() {
        // An upper edge along the top and a lower edge that climbs and falls steeply (a longer
        // path than the upper's): the band fills the upper right corner though neither edge's
        // points are in it.
        let lower = [(0.0, 318.0), (230.0, 30.0), (460.0, 318.0)];
        let upper = [(0.0, 2.0), (230.0, 2.0), (460.0, 2.0)];
        let obs = Obstacles {
            data: band_samples(&lower, &upper),
            marks: Vec::new(),
        };
        let size = (120.0, 40.0);
        let ur = corner_box(Corner::UpperRight, DIMS, size);
        assert!(obs.data.iter().any(|p| ur.contains(*p)));
        assert_ne!(
            place(DIMS, size, &obs).map(|p| p.0),
            Some(Corner::UpperRight)
        );
    }

    #[test]
    fn marks_are_avoided_when_a_corner_allows() {
        let size = (120.0, 40.0);
        let mut obs = data(&[(0.0, 319.0), (460.0, 319.0)]);
        // A vertical SLO line through the right part.
        obs.marks = polyline_samples(&[(400.0, 0.0), (400.0, 320.0)]);
        assert_eq!(place(DIMS, size, &obs).unwrap().0, Corner::UpperLeft);
    }

    #[test]
    fn data_everywhere_leaves_no_corner_until_the_axis_is_raised() {
        let mut pts = Vec::new();
        for i in 0..=46 {
            for j in 0..=32 {
                pts.push((f64::from(i) * 10.0, f64::from(j) * 10.0));
            }
        }
        let size = (120.0, 40.0);
        let obs = Obstacles {
            data: pts.clone(),
            marks: Vec::new(),
        };
        assert_eq!(place(DIMS, size, &obs), None);
        // Raising the axis by the headroom squeezes the data below the legend's band.
        let f = headroom(DIMS, size);
        let squeezed = Obstacles {
            data: pts
                .iter()
                .map(|&(x, y)| (x, DIMS.1 * f + y * (1.0 - f)))
                .collect(),
            marks: Vec::new(),
        };
        let (c, r) = place(DIMS, size, &squeezed).expect("free after the headroom");
        assert_eq!(c, Corner::UpperRight);
        assert!(!squeezed.data.iter().any(|p| r.contains(*p)));
    }

    #[test]
    fn a_placed_legend_never_covers_data() {
        // Random scatters (a fixed LCG): whatever corner is chosen holds none of them.
        let mut s: u64 = 0x5eed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut placed = 0;
        for _ in 0..200 {
            let n = 1 + (next() * 40.0) as usize;
            let pts: Vec<(f64, f64)> = (0..n).map(|_| (next() * 460.0, next() * 320.0)).collect();
            let obs = data(&pts);
            if let Some((_, r)) = place(DIMS, (150.0, 60.0), &obs) {
                placed += 1;
                assert!(!obs.data.iter().any(|p| r.contains(*p)));
            }
        }
        assert!(placed > 20, "{placed}");
    }
}
