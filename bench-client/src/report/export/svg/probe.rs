//! Reading a drawn SVG back in tests: elements, attributes, dots, lines, legend boxes, texts.

/// The value of attribute `name` in the element text `el`.
pub(crate) fn attr(el: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let i = el.find(&key)? + key.len();
    Some(el[i..].split('"').next()?.to_string())
}

pub(crate) fn num(el: &str, name: &str) -> f64 {
    attr(el, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {name} in {el}"))
}

/// The opening tags of the `tag` elements of `svg`.
pub(crate) fn elements<'s>(svg: &'s str, tag: &str) -> Vec<&'s str> {
    let open = format!("<{tag} ");
    svg.match_indices(&open)
        .filter_map(|(i, _)| svg[i..].split_once('>').map(|(el, _)| el))
        .collect()
}

/// The legend boxes: white, 0.85 opaque (x, y, width, height).
pub(crate) fn legend_boxes(svg: &str) -> Vec<(f64, f64, f64, f64)> {
    elements(svg, "rect")
        .into_iter()
        .filter(|r| {
            attr(r, "fill").as_deref() == Some("#FFFFFF")
                && attr(r, "opacity").as_deref() == Some("0.85")
        })
        .map(|r| (num(r, "x"), num(r, "y"), num(r, "width"), num(r, "height")))
        .collect()
}

/// The dots (circle centres).
pub(crate) fn dots(svg: &str) -> Vec<(f64, f64)> {
    elements(svg, "circle")
        .into_iter()
        .map(|c| (num(c, "cx"), num(c, "cy")))
        .collect()
}

/// The points of every polyline stroked in `color`.
pub(crate) fn polylines(svg: &str, color: &str) -> Vec<Vec<(f64, f64)>> {
    elements(svg, "polyline")
        .into_iter()
        .filter(|p| attr(p, "stroke").as_deref() == Some(color))
        .map(|p| {
            attr(p, "points")
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|xy| {
                    let (x, y) = xy.split_once(',')?;
                    Some((x.parse().ok()?, y.parse().ok()?))
                })
                .collect()
        })
        .collect()
}

/// The texts of `svg`, trimmed.
pub(crate) fn texts(svg: &str) -> Vec<String> {
    svg.split("<text ")
        .skip(1)
        .filter_map(|t| t.split_once('>')?.1.split_once("</text>"))
        .map(|(s, _)| s.trim().to_string())
        .collect()
}

/// A straight line from `pts`: vertical (`true`) or horizontal, at least `len` pixels long.
pub(crate) fn is_straight(pts: &[(f64, f64)], vertical: bool, len: f64) -> bool {
    let [a, b] = pts else { return false };
    if vertical {
        a.0 == b.0 && (a.1 - b.1).abs() >= len
    } else {
        a.1 == b.1 && (a.0 - b.0).abs() >= len
    }
}
