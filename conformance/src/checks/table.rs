//! The results as a plain-text table with a count of each verdict.

use super::outcome::{CheckResult, Outcome};

/// Render the results as a table.
pub fn render_table(results: &[CheckResult]) -> String {
    let idw = results.iter().map(|r| r.id.len()).max().unwrap_or(2).max(5);
    let mut s = format!("{:<idw$}  {:<13}  evidence\n", "check", "result");
    s.push_str(&format!("{}\n", "-".repeat(idw + 2 + 13 + 2 + 8)));
    for r in results {
        s.push_str(&format!(
            "{:<idw$}  {:<13}  {}\n",
            r.id,
            r.outcome.as_str(),
            r.evidence
        ));
    }
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
}
