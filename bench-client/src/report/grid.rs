//! The one aligner of the plain-text tables: rows of cells, each column left- or right-aligned to
//! its widest cell (or a minimum width), columns separated by spaces, no borders, and no trailing
//! spaces on a line. Widths count characters as a terminal shows them (Unicode width).

use comfy_table::presets::NOTHING;
use comfy_table::{CellAlignment, ColumnConstraint, Table, Width};

/// How a column lines up its cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One column: its alignment, its least width and the spaces before it (after the column
/// before: one unless set; before the first column: the line's indent, none unless set).
#[derive(Clone, Copy, Debug)]
pub struct Col {
    align: Align,
    min: u16,
    gap: Option<u16>,
}

impl Col {
    /// A left-aligned column.
    pub const fn left() -> Col {
        Col {
            align: Align::Left,
            min: 0,
            gap: None,
        }
    }

    /// A right-aligned column.
    pub const fn right() -> Col {
        Col {
            align: Align::Right,
            min: 0,
            gap: None,
        }
    }

    /// At least `w` characters wide; a wider cell widens the whole column.
    pub const fn min(self, w: u16) -> Col {
        Col { min: w, ..self }
    }

    /// `n` spaces before the column (for the first column: the indent).
    pub const fn gap(self, n: u16) -> Col {
        Col {
            gap: Some(n),
            ..self
        }
    }
}

/// A table of text cells; [`Grid::render`] lines them up.
#[derive(Debug)]
pub struct Grid {
    cols: Vec<Col>,
    table: Table,
    /// Columns that have their settings (the table's first ones).
    set: usize,
}

impl Grid {
    /// An empty table with these columns. A row with fewer cells leaves the rest empty; a cell
    /// past the last column is left-aligned one space after it.
    pub fn new(cols: &[Col]) -> Grid {
        let mut table = Table::new();
        table.load_preset(NOTHING);
        Grid {
            cols: cols.to_vec(),
            table,
            set: 0,
        }
    }

    /// Columns with these alignments, `gap` spaces apart, no indent.
    pub fn spaced(aligns: &[Align], gap: u16) -> Grid {
        let cols: Vec<Col> = aligns
            .iter()
            .enumerate()
            .map(|(i, a)| Col {
                align: *a,
                min: 0,
                gap: Some(if i == 0 { 0 } else { gap }),
            })
            .collect();
        Grid::new(&cols)
    }

    /// Appends a row.
    pub fn row<S: ToString>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Grid {
        self.table
            .add_row(cells.into_iter().map(|c| c.to_string()).collect::<Vec<_>>());
        // A row can add columns; each takes its settings once, when it comes to exist.
        let set = self.set;
        for (i, col) in self.table.column_iter_mut().enumerate().skip(set) {
            let c = self.cols.get(i).copied().unwrap_or(Col::left());
            let gap = c.gap.unwrap_or(if i == 0 { 0 } else { 1 });
            col.set_padding((gap, 0));
            col.set_cell_alignment(match c.align {
                Align::Left => CellAlignment::Left,
                Align::Right => CellAlignment::Right,
            });
            if c.min > 0 {
                col.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(
                    c.min.saturating_add(gap),
                )));
            }
        }
        self.set = self.table.column_count();
        self
    }

    /// The rows lined up, each line ending in a newline.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in self.table.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_take_their_widest_cell_and_their_alignment() {
        let mut g = Grid::spaced(&[Align::Right, Align::Left, Align::Right], 2);
        g.row(["n", "name", "value"]);
        g.row(["10", "a", "1.5"]);
        g.row(["7", "longer name", "-"]);
        assert_eq!(
            g.render(),
            " n  name         value\n10  a              1.5\n 7  longer name      -\n"
        );
    }

    #[test]
    fn minimum_widths_indent_and_missing_cells() {
        let mut g = Grid::new(&[Col::left().min(6).gap(2), Col::right().min(4), Col::left()]);
        g.row(["ab", "1", "x"]);
        g.row(["c", "22"]);
        g.row(["toolongcell", "3", "y"]);
        assert_eq!(
            g.render(),
            "  ab             1 x\n  c             22\n  toolongcell    3 y\n"
        );
    }

    #[test]
    fn an_empty_table_is_no_lines() {
        assert_eq!(Grid::new(&[Col::left(), Col::right()]).render(), "");
    }
}
