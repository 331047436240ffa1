//! What a check says: its verdict and evidence.

/// Verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The server behaves as the mock assumes.
    Pass,
    /// The server contradicts the assumption: the evidence says how.
    Fail,
    /// The server does not offer the feature (an endpoint or field is absent).
    NotSupported,
}

impl Outcome {
    /// Label for the table.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Fail => "FAIL",
            Self::NotSupported => "not supported",
        }
    }
}

/// One check's result.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckResult {
    /// Stable identifier.
    pub id: &'static str,
    /// What is checked, in words.
    pub title: &'static str,
    /// Verdict.
    pub outcome: Outcome,
    /// What the server did.
    pub evidence: String,
}

pub(super) fn result(
    id: &'static str,
    title: &'static str,
    outcome: Outcome,
    evidence: impl Into<String>,
) -> CheckResult {
    CheckResult {
        id,
        title,
        outcome,
        evidence: evidence.into(),
    }
}
