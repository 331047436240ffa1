//! Two observations of one case, real and mock, into a list of differences.

use super::observe::Observed;
use serde::Serialize;
use std::collections::BTreeSet;

/// What differs. The first four are behaviour: a client would act differently on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Status,
    ContentType,
    StreamEnd,
    InBandError,
    /// A key path the real server sends and the mock does not.
    KeyMissing,
    /// A key path the mock sends and the real server does not.
    KeyExtra,
    MetricMissing,
    MetricExtra,
    Tokens,
    ErrorMessage,
}

impl Kind {
    /// The name used in output and in the known-differences list.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Status => "status",
            Kind::ContentType => "content-type",
            Kind::StreamEnd => "stream-end",
            Kind::InBandError => "in-band-error",
            Kind::KeyMissing => "key-missing",
            Kind::KeyExtra => "key-extra",
            Kind::MetricMissing => "metric-missing",
            Kind::MetricExtra => "metric-extra",
            Kind::Tokens => "tokens",
            Kind::ErrorMessage => "error-message",
        }
    }

    /// Every kind, for parsing the list.
    pub const ALL: [Kind; 10] = [
        Kind::Status,
        Kind::ContentType,
        Kind::StreamEnd,
        Kind::InBandError,
        Kind::KeyMissing,
        Kind::KeyExtra,
        Kind::MetricMissing,
        Kind::MetricExtra,
        Kind::Tokens,
        Kind::ErrorMessage,
    ];

    /// Whether the difference is one of behaviour (status, content type, stream end, in-band error).
    pub fn is_behaviour(self) -> bool {
        matches!(
            self,
            Kind::Status | Kind::ContentType | Kind::StreamEnd | Kind::InBandError
        )
    }
}

/// One difference of one case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    pub case: String,
    pub kind: Kind,
    /// The key path, metric name or token field concerned; empty for the whole response.
    pub what: String,
    pub real: String,
    pub mock: String,
    /// The reason from the known-differences list, when it lists this difference.
    pub known: Option<String>,
}

/// Every difference between the real server's answer and the mock's to one case.
pub fn compare(case: &str, real: &Observed, mock: &Observed) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut add = |kind, what: &str, r: String, m: String| {
        out.push(Difference {
            case: case.to_string(),
            kind,
            what: what.to_string(),
            real: r,
            mock: m,
            known: None,
        })
    };
    if real.status != mock.status {
        add(
            Kind::Status,
            "",
            real.status.to_string(),
            mock.status.to_string(),
        );
    }
    if real.content_type != mock.content_type {
        add(
            Kind::ContentType,
            "",
            real.content_type.clone(),
            mock.content_type.clone(),
        );
    }
    if real.end != mock.end {
        add(
            Kind::StreamEnd,
            "",
            real.end.to_string(),
            mock.end.to_string(),
        );
    }
    if real.in_band_error != mock.in_band_error {
        let s = |e: &Option<String>| e.clone().unwrap_or_else(|| "none".into());
        add(
            Kind::InBandError,
            "",
            s(&real.in_band_error),
            s(&mock.in_band_error),
        );
    }
    let sets: [(&BTreeSet<String>, &BTreeSet<String>, Kind, Kind); 2] = [
        (
            &real.key_paths,
            &mock.key_paths,
            Kind::KeyMissing,
            Kind::KeyExtra,
        ),
        (
            &real.metric_names,
            &mock.metric_names,
            Kind::MetricMissing,
            Kind::MetricExtra,
        ),
    ];
    for (r, m, missing, extra) in sets {
        for p in r.difference(m) {
            add(missing, p, "present".into(), "absent".into());
        }
        for p in m.difference(r) {
            add(extra, p, "absent".into(), "present".into());
        }
    }
    let opt = |x: Option<u64>| x.map_or_else(|| "none".into(), |v| v.to_string());
    let counts = [
        ("prompt", real.tokens.prompt, mock.tokens.prompt),
        ("completion", real.tokens.completion, mock.tokens.completion),
        ("cached", real.tokens.cached, mock.tokens.cached),
    ];
    for (what, r, m) in counts {
        if r != m {
            add(Kind::Tokens, what, opt(r), opt(m));
        }
    }
    if real.error_message != mock.error_message {
        let s = |e: &Option<String>| e.clone().unwrap_or_else(|| "none".into());
        add(
            Kind::ErrorMessage,
            "",
            s(&real.error_message),
            s(&mock.error_message),
        );
    }
    out
}

/// Key paths of the real server's per-request answers that the mock's carry too, summed over
/// cases: (shared, the real server's).
pub fn coverage<'a>(
    pairs: impl IntoIterator<Item = (&'a Observed, &'a Observed)>,
) -> (usize, usize) {
    pairs.into_iter().fold((0, 0), |(shared, all), (r, m)| {
        (
            shared + r.key_paths.intersection(&m.key_paths).count(),
            all + r.key_paths.len(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::observe::observe;
    use super::*;

    #[test]
    fn each_kind_of_difference_is_found() {
        let real = observe(
            200,
            "text/event-stream; charset=utf-8",
            "data: {\"a\":1,\"usage\":{\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n",
            None,
        );
        let mock = observe(
            400,
            "application/json",
            "{\"b\":1,\"message\":\"no\"}",
            None,
        );
        let d = compare("c", &real, &mock);
        let kinds: BTreeSet<Kind> = d.iter().map(|x| x.kind).collect();
        for k in [
            Kind::Status,
            Kind::ContentType,
            Kind::StreamEnd,
            Kind::KeyMissing,
            Kind::KeyExtra,
            Kind::Tokens,
            Kind::ErrorMessage,
        ] {
            assert!(kinds.contains(&k), "{k:?} in {d:?}");
        }
        assert!(compare("c", &real, &real).is_empty());
        assert_eq!(coverage([(&real, &real)]), (3, 3));
        assert_eq!(coverage([(&real, &mock)]).0, 0);
    }
}
