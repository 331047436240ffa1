//! The results as a plain-text table with a count of each verdict.

use bench_client::report::grid::{Col, Grid};

use super::outcome::{CheckResult, Outcome};

/// Render the results as a table.
pub fn render_table(results: &[CheckResult]) -> String {
    // The id column is at least as wide as its header; the rule under the header spans it.
    let mut g = Grid::new(&[
        Col::left().min(5),
        Col::left().min(13).gap(2),
        Col::left().gap(2),
    ]);
    g.row(["check", "result", "evidence"]);
    for r in results {
        g.row([r.id, r.outcome.as_str(), r.evidence.as_str()]);
    }
    let table = g.render();
    let (head, rows) = table.split_once('\n').unwrap_or((&table, ""));
    let mut s = format!("{head}\n{}\n{rows}", "-".repeat(head.chars().count()));
    let count = |o: Outcome| results.iter().filter(|r| r.outcome == o).count();
    s.push_str(&format!(
        "\n{} passed, {} failed, {} not supported\n",
        count(Outcome::Pass),
        count(Outcome::Fail),
        count(Outcome::NotSupported)
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::outcome::result;

    #[test]
    fn table_counts_outcomes() {
        let rs = [
            result("a", "t", Outcome::Pass, "x"),
            result("b", "t", Outcome::Fail, "y"),
            result("c", "t", Outcome::NotSupported, "z"),
        ];
        let t = render_table(&rs);
        assert!(t.contains("1 passed, 1 failed, 1 not supported"), "{t}");
        assert!(t.contains("FAIL"));
    }

    #[test]
    fn columns_line_up_under_a_rule_as_wide_as_the_header() {
        let rs = [
            result("a", "t", Outcome::Pass, "x"),
            result("a_longer_id", "t", Outcome::NotSupported, "no /metrics"),
        ];
        let t = render_table(&rs);
        let want = "\
check        result         evidence
------------------------------------
a            pass           x
a_longer_id  not supported  no /metrics
";
        assert!(t.starts_with(want), "{t}");
    }
}
