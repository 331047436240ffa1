//! An imported request as this project's record: a trace rebuilt from the first-token time and the
//! gaps between chunks, load fields from the file's start times (or a rebuilt closed loop), and,
//! where per-chunk counts are unknown, the decode rate and TPOT of the source's own definition.

use super::{Request, Run, TpotDef};
use crate::plan::Shard;
use crate::results::{load_record, ErrorKind, LoadInfo, Record, RecordError};
use crate::trace::{Chunk, RequestTrace, Stamps, StreamEnd, Usage};

fn ns(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * 1e9).round() as u64
    } else {
        0
    }
}

/// Each request's end after its send, seconds: the file's, else its last chunk.
fn e2e_s(r: &Request) -> f64 {
    r.e2e_s.unwrap_or_else(|| {
        if r.error.is_some() {
            0.0
        } else {
            r.ttft_s + r.gaps_s.iter().sum::<f64>()
        }
    })
}

/// Scheduled start and send of each request, ns after the run's origin. Without start times in the
/// file, a closed loop of `concurrency` is rebuilt: each request starts, in the file's order, when the
/// earliest of the slots frees (the order bench_serving's semaphore admits them in); the client's own
/// turnaround between one request's end and the next's start is not in the file and counts as zero.
fn place(run: &Run) -> Vec<(u64, u64)> {
    if let Some(rebuilt) = run.rebuilt_schedule {
        let mut slots = vec![0.0f64; rebuilt.concurrency.max(1)];
        return run
            .requests
            .iter()
            .map(|r| {
                let (k, start) = slots
                    .iter()
                    .copied()
                    .enumerate()
                    .min_by(|a, b| a.1.total_cmp(&b.1))
                    .unwrap_or((0, 0.0));
                slots[k] = start + e2e_s(r);
                (ns(start), ns(start))
            })
            .collect();
    }
    run.requests
        .iter()
        .map(|r| {
            let sent = r.sent_s.unwrap_or(0.0);
            let scheduled = r.scheduled_s.unwrap_or(sent).min(sent);
            (ns(scheduled), ns(sent))
        })
        .collect()
}

fn trace_of(run: &Run, run_index: usize, i: usize, r: &Request) -> RequestTrace {
    let mut chunks = Vec::with_capacity(r.gaps_s.len() + 1);
    if r.error.is_none() {
        // Instants from the running sum in seconds, so that rounding does not add up over chunks.
        let mut at_s = r.ttft_s;
        for k in 0..=r.gaps_s.len() {
            if k > 0 {
                at_s += r.gaps_s[k - 1];
            }
            chunks.push(Chunk {
                at_ns: ns(at_s),
                tokens: r.chunk_tokens.as_ref().and_then(|t| t.get(k).copied()),
                content_event: true,
                ..Chunk::default()
            });
        }
        if let Some(last) = chunks.last_mut() {
            last.usage = Some(Usage {
                prompt_tokens: r.input_len,
                completion_tokens: Some(r.output_len),
                cached_tokens: None,
            });
        }
    }
    let last_ns = chunks.last().map_or(0, |c| c.at_ns);
    let end_ns = ns(e2e_s(r)).max(last_ns);
    RequestTrace {
        rid: format!("{}-{run_index}-{i}", run.source.as_str()),
        dialect: run.dialect,
        prompt_tokens_sent: r.input_len,
        max_tokens: r.output_len,
        status: None,
        headers_ns: None,
        reads: 0,
        chunks,
        done_ns: r.error.is_none().then_some(end_ns),
        end: if r.error.is_none() {
            StreamEnd::Done
        } else {
            StreamEnd::Eof
        },
        end_ns,
        attribution: run.attribution,
        stamps: Stamps::Task,
        send_delay_ns: None,
        output_ids: None,
    }
}

/// The records of one run (`run_index`: its place in the file, for the request ids), built one at
/// a time: a run of millions of chunks is written without holding its records.
pub fn records(run: &Run, run_index: usize) -> impl Iterator<Item = Record> + '_ {
    let placed = place(run);
    run.requests
        .iter()
        .zip(placed)
        .enumerate()
        .map(move |(i, (r, (scheduled_ns, sent_ns)))| {
            let info = LoadInfo {
                index: i as u64,
                shard: Shard::default(),
                seed: 0,
                start_unix_ms: run.start_unix_ms,
                scheduled_ns,
                sent_ns,
                client_queue_ns: sent_ns.saturating_sub(scheduled_ns),
                ttft_from_schedule_ms: None,
                prefix_group: None,
                session: None,
            };
            let trace = trace_of(run, run_index, i, r);
            let mut rec = load_record(trace, r.input_len.unwrap_or(0), info);
            if let Some(e) = &r.error {
                rec.error = Some(RecordError {
                    kind: ErrorKind::Imported,
                    message: crate::net::redact::redact_text(&format!(
                        "{} reported: {}",
                        run.source.as_str(),
                        e.trim()
                    )),
                });
            } else if !run.attribution.counts_known() {
                source_decode(&mut rec, run.tpot);
            }
            rec
        })
}

/// Per-chunk counts unknown: the decode rate and TPOT of the source's definition, over all output
/// tokens but the first (the record's `token_attribution` says they are the source's).
fn source_decode(rec: &mut Record, def: TpotDef) {
    let Some(trace) = &rec.trace else { return };
    let out: Vec<&Chunk> = trace.chunks.iter().filter(|c| c.carries_output()).collect();
    let (Some(first), Some(last)) = (out.first(), out.last()) else {
        return;
    };
    let n = rec.completion_tokens.unwrap_or(0);
    let end = match def {
        TpotDef::EndMinusFirst => trace.end_ns,
        TpotDef::LastMinusFirst => last.at_ns,
    };
    let span_ns = end.saturating_sub(first.at_ns);
    if n >= 2 && span_ns > 0 {
        let span_s = span_ns as f64 / 1e9;
        rec.decode_tok_s = Some(f64::from(n - 1) / span_s);
        rec.tpot_ms = Some(span_s * 1e3 / f64::from(n - 1));
        rec.decode_unavailable = None;
    }
}
