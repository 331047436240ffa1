//! The client against the mock's ground truth: per-request TTFT overhead, per-chunk lags and
//! pacing errors, and the report rows that show them.

use anyhow::Result;
use bench_client::measure::measure;
use bench_client::trace::RequestTrace;

use crate::client::sent_unix;
use crate::mock::Mock;
use crate::report::{fmt_counts, ns_to_ms, Report};

/// Client TTFT minus ground-truth TTFT (ms) per request, and every chunk's client arrival minus its
/// ground-truth emission (ms). Failed requests and chunk-count mismatches are counted.
pub(crate) struct Lags {
    /// Client TTFT minus the ground truth counted from the mock's handler (ms).
    pub(crate) first: Vec<f64>,
    /// Client TTFT minus the wire-level ground truth: from the request's arrival at the mock's
    /// socket (kernel receive timestamp) to the first chunk's hand-off to the connection (ms).
    pub(crate) first_wire: Vec<f64>,
    /// The mock's intake: its handler received the request minus the request's arrival at its
    /// socket (ms).
    pub(crate) intake_ms: Vec<f64>,
    /// Requests stamped with `stamp_sent`: arrival at the mock's socket minus the client's send
    /// (ms).
    pub(crate) to_socket_ms: Vec<f64>,
    pub(crate) all: Vec<f64>,
    pub(crate) failed: usize,
    pub(crate) mismatched: usize,
    pub(crate) per_request_max_pacing_ms: Vec<f64>,
    /// Every streamed chunk's pacing error: sent by the mock's HTTP layer minus modelled (ms).
    pub(crate) pacing_ms: Vec<f64>,
    /// The same for first chunks only (they leave while other requests still arrive).
    pub(crate) first_pacing_ms: Vec<f64>,
    /// The same for every chunk after each stream's first.
    pub(crate) later_pacing_ms: Vec<f64>,
    /// Requests stamped with `stamp_sent`: the mock's handler received the request minus the
    /// client's send, on the shared real-time clock (ms).
    pub(crate) way_in_ms: Vec<f64>,
    /// The same requests: client TTFT minus way in minus the first chunk's `sent_ns` (ms).
    pub(crate) way_out_ms: Vec<f64>,
    /// The same requests, every chunk: the client's arrival minus the mock's `sent_ns`, both on
    /// the real-time clock (the request's way in taken out), in ms.
    pub(crate) delivery_ms: Vec<f64>,
    /// Socket stamping: the client's time from the call to the write of the request's first byte,
    /// which is not in its TTFT (ms).
    pub(crate) send_delay_ms: Vec<f64>,
    /// How many traces had each kind of stamps.
    pub(crate) stamps: std::collections::BTreeMap<String, usize>,
}

pub(crate) async fn lags(
    mock: &Mock,
    http: &reqwest::Client,
    traces: &[RequestTrace],
) -> Result<Lags> {
    let mut l = Lags {
        first: Vec::new(),
        first_wire: Vec::new(),
        intake_ms: Vec::new(),
        to_socket_ms: Vec::new(),
        all: Vec::new(),
        failed: 0,
        mismatched: 0,
        per_request_max_pacing_ms: Vec::new(),
        pacing_ms: Vec::new(),
        first_pacing_ms: Vec::new(),
        later_pacing_ms: Vec::new(),
        way_in_ms: Vec::new(),
        way_out_ms: Vec::new(),
        delivery_ms: Vec::new(),
        send_delay_ms: Vec::new(),
        stamps: Default::default(),
    };
    for tr in traces {
        *l.stamps.entry(tr.stamps.as_str().to_string()).or_default() += 1;
        let truth = mock.truth(http, &tr.rid).await?;
        l.per_request_max_pacing_ms
            .push(ns_to_ms(truth.max_pacing_error_ns));
        l.pacing_ms.extend(
            truth
                .chunks
                .iter()
                .filter_map(|c| c.sent_ns.map(|s| ns_to_ms(s) - ns_to_ms(c.model_ns))),
        );
        for (k, c) in truth.chunks.iter().enumerate() {
            if let Some(s) = c.sent_ns {
                let e = ns_to_ms(s) - ns_to_ms(c.model_ns);
                if k == 0 {
                    l.first_pacing_ms.push(e);
                } else {
                    l.later_pacing_ms.push(e);
                }
            }
        }
        let Ok(m) = measure(tr) else {
            l.failed += 1;
            continue;
        };
        let Some(t0) = truth.chunks.first() else {
            l.failed += 1;
            continue;
        };
        if let Some(d) = tr.send_delay_ns {
            l.send_delay_ms.push(ns_to_ms(d));
        }
        // The mock's emission of a chunk: when its HTTP layer handed the bytes to the connection.
        let sent = |c: &mock_server::ChunkTruth| ns_to_ms(c.sent_ns.unwrap_or(c.at_ns));
        l.first.push(m.ttft_ms - sent(t0));
        let stamped = sent_unix()
            .lock()
            .ok()
            .and_then(|m| m.get(&tr.rid).copied());
        let way_in = match (stamped, truth.received_unix_ns > 0) {
            (Some(s), true) => Some((truth.received_unix_ns as f64 - s as f64) / 1e6),
            _ => None,
        };
        if let Some(w) = way_in {
            l.way_in_ms.push(w);
            l.way_out_ms.push(m.ttft_ms - w - sent(t0));
        }
        if let Some(intake) = intake_ms(&truth) {
            l.intake_ms.push(intake);
            l.first_wire.push(m.ttft_ms - intake - sent(t0));
            if let Some(w) = way_in {
                l.to_socket_ms.push(w - intake);
            }
        }
        let client_chunks: Vec<u64> = tr
            .chunks
            .iter()
            .filter(|c| c.carries_output())
            .map(|c| c.at_ns)
            .collect();
        if client_chunks.len() != truth.chunks.len() {
            l.mismatched += 1;
            continue;
        }
        for (c, t) in client_chunks.iter().zip(&truth.chunks) {
            l.all.push(ns_to_ms(*c) - sent(t));
            if let Some(w) = way_in {
                l.delivery_ms.push(ns_to_ms(*c) - w - sent(t));
            }
        }
    }
    Ok(l)
}

/// The overhead rows of one set of requests: against the wire-level ground truth (the target),
/// split into the request's way to the mock's socket and the first chunk's way back, then against
/// the ground truth counted from the mock's handler, whose difference is the mock's intake.
pub(crate) fn overhead_rows(r: &mut Report, what: &str, target: &str, l: &Lags) {
    r.dist_row(format!("overhead, {what}"), target, &l.first_wire);
    r.row("  traces by stamps", "-", fmt_counts(&l.stamps));
    r.dist_row(
        "  of which the request's way to the mock's socket (socket arrival - client sent, real-time clock)",
        "-",
        &l.to_socket_ms,
    );
    r.dist_row(
        "  of which the first chunk's way back (client arrival - the mock's hand-off to the connection)",
        "-",
        &l.way_out_ms,
    );
    if !l.send_delay_ms.is_empty() {
        r.dist_row(
            "  not in it: the client's send delay (call to the write of the request's first byte)",
            "-",
            &l.send_delay_ms,
        );
    }
    r.dist_row(
        "  overhead counted from the mock's handler instead (the previous definition: adds the mock's intake)",
        "-",
        &l.first,
    );
    r.dist_row(
        "  the mock's intake: the request in its socket before the handler (received - socket arrival)",
        "-",
        &l.intake_ms,
    );
}

/// How long the request waited between its arrival at the mock's socket and the mock's handler
/// (ms), where the mock recorded both.
pub(crate) fn intake_ms(truth: &mock_server::RequestTruth) -> Option<f64> {
    match (truth.socket_arrival_unix_ns, truth.received_unix_ns) {
        (Some(a), r) if r > 0 => Some((r as f64 - a as f64) / 1e6),
        _ => None,
    }
}
