//! The native dialect's JSON (`/generate`), written directly into a buffer, with SGLang 0.5.23's
//! `meta_info`: the fields every event carries, the scheduler's timings with `enable_metrics`,
//! logprobs when asked for, and the finish-only fields on the last event.

use super::{Collected, Renderer, Scratch};
use crate::engine::Finish;
use crate::tokenizer;
use std::io::Write;

/// The mock's log-probability of an output token: a fixed function of the id (no model behind it),
/// in the range a random model over a 4k-32k vocabulary gives.
fn logprob(id: u32) -> f64 {
    -7.0 - f64::from(id % 1000) / 1000.0
}

/// Seconds as JSON (a float, as Python prints them).
fn secs(buf: &mut Vec<u8>, key: &str, v: f64) {
    key_of(buf, key);
    let _ = serde_json::to_writer(&mut *buf, &v);
}

/// `,"key":`.
fn key_of(buf: &mut Vec<u8>, key: &str) {
    buf.extend_from_slice(b",\"");
    buf.extend_from_slice(key.as_bytes());
    buf.extend_from_slice(b"\":");
}

/// An integer as JSON.
fn int(buf: &mut Vec<u8>, v: impl itoa::Integer) {
    buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

impl Renderer {
    /// One native event (or the non-streaming answer) as JSON, written directly: this is the
    /// hot path at thousands of streams, and cumulative output makes every event longer.
    pub(in crate::http) fn native(&mut self, buf: &mut Vec<u8>, o: &Collected) {
        let (new_ids, cached, completion) = (&o.ids[..], o.cached, o.completion);
        let (finish, speculative, at_ns) = (&o.finish, &o.speculative, o.at_ns);
        let opts = &self.opts;
        let state = &mut self.output;
        let first = state.events == 0;
        state.events += 1;
        if first {
            state.first_at_ns = o.first_at_ns;
        }
        // Only the new tokens are rendered; cumulative output appends them to the JSON kept from
        // the events before (escaping is per character, so escaped pieces concatenate). The new
        // pieces go into buffers the renderer keeps from event to event.
        let Scratch {
            ids_json: new_ids_json,
            text_json: new_text,
            logprobs_json: new_lp,
        } = &mut self.scratch;
        new_ids_json.clear();
        new_text.clear();
        new_lp.clear();
        let mut num = itoa::Buffer::new();
        for id in new_ids {
            if !new_ids_json.is_empty() {
                new_ids_json.push(b',');
            }
            new_ids_json.extend_from_slice(num.format(*id).as_bytes());
        }
        tokenizer::decode_into(new_ids, new_text);
        if opts.logprobs {
            for id in new_ids {
                if !new_lp.is_empty() {
                    new_lp.push(b',');
                }
                let _ = write!(new_lp, "[{:?},{id},null]", logprob(*id));
            }
        }
        let (ids, text, lp): (&[u8], &[u8], &[u8]) = if opts.incremental {
            (new_ids_json, new_text, new_lp)
        } else {
            append(&mut state.ids_json, new_ids_json);
            state.text_json.extend_from_slice(new_text);
            append(&mut state.logprobs_json, new_lp);
            (&state.ids_json, &state.text_json, &state.logprobs_json)
        };
        // Writing into a Vec cannot fail; the results are ignored for that reason.
        buf.extend_from_slice(b"{\"text\":\"");
        buf.extend_from_slice(text);
        buf.extend_from_slice(b"\",\"output_ids\":[");
        buf.extend_from_slice(ids);
        buf.extend_from_slice(b"],\"meta_info\":{\"id\":");
        buf.extend_from_slice(&self.rid_json);
        buf.extend_from_slice(b",\"finish_reason\":");
        match finish {
            None => buf.extend_from_slice(b"null"),
            Some(Finish::Length(n)) => {
                buf.extend_from_slice(b"{\"type\":\"length\",\"length\":");
                int(buf, *n);
                buf.push(b'}');
            }
            Some(Finish::Stop(t)) => {
                buf.extend_from_slice(b"{\"type\":\"stop\",\"matched\":");
                int(buf, *t);
                buf.push(b'}');
            }
        }
        buf.extend_from_slice(b",\"prompt_tokens\":");
        int(buf, opts.prompt_tokens);
        buf.extend_from_slice(b",\"weight_version\":\"default\",\"num_retractions\":");
        int(buf, o.times.retractions);
        let t0 = self.received_unix_s;
        let at = |ns: u64| ns as f64 / 1e9;
        if opts.metrics {
            buf.extend_from_slice(b",\"storage_prefetch_wait\":0.0,\"storage_staging_wait\":0.0");
            if let Some(ns) = o.times.forward_entry_ns {
                secs(buf, "forward_entry_time", t0 + at(ns));
            }
            if let Some(ns) = o.times.prefill_finished_ns {
                secs(buf, "prefill_finished_time", t0 + at(ns));
            }
            secs(buf, "queue_time", o.times.forward_entry_ns.map_or(0.0, at));
        }
        if opts.logprobs {
            buf.extend_from_slice(b",\"input_token_logprobs\":[],\"output_token_logprobs\":[");
            buf.extend_from_slice(lp);
            buf.extend_from_slice(b"],\"output_token_logprobs_length\":");
            int(buf, completion);
        }
        buf.extend_from_slice(b",\"reasoning_tokens\":0,\"completion_tokens\":");
        int(buf, completion);
        buf.extend_from_slice(b",\"cached_tokens\":");
        int(buf, cached);
        if finish.is_some() {
            buf.extend_from_slice(
                b",\"weight_versions\":[{\"version\":\"default\",\"start\":0,\"end\":",
            );
            int(buf, completion);
            buf.extend_from_slice(b"}]");
        }
        if cached > 0 {
            buf.extend_from_slice(b",\"cached_tokens_details\":{\"device\":");
            int(buf, cached);
            buf.extend_from_slice(b",\"host\":0}");
        } else {
            buf.extend_from_slice(b",\"cached_tokens_details\":null");
        }
        buf.extend_from_slice(b",\"dp_rank\":null");
        let first_ns = state.first_at_ns;
        let sent_ts = t0 + at(first_ns);
        if finish.is_none() {
            if first && opts.streamed {
                secs(buf, "response_sent_to_client_ts", sent_ts);
            }
        } else {
            // The instant the engine handed the final chunk over.
            secs(buf, "e2e_latency", at(at_ns));
            if let Some(s) = speculative {
                buf.extend_from_slice(b",\"spec_verify_ct\":");
                int(buf, s.verify_ct);
                buf.extend_from_slice(b",\"spec_accept_length\":");
                let _ = serde_json::to_writer(&mut *buf, &s.accept_length);
                buf.extend_from_slice(b",\"spec_accept_rate\":");
                let _ = serde_json::to_writer(&mut *buf, &s.accept_rate);
                buf.extend_from_slice(b",\"spec_accept_histogram\":");
                let _ = serde_json::to_writer(&mut *buf, &s.histogram);
            }
            if opts.metrics {
                secs(buf, "request_received_ts", t0);
                if first_ns > 0 {
                    secs(
                        buf,
                        "first_token_latency",
                        at(first_ns.saturating_sub(opts.way_ns)),
                    );
                }
                secs(buf, "api_server_dispatch_finish_ts", t0);
                if opts.streamed {
                    secs(buf, "response_sent_to_client_ts", sent_ts);
                }
                secs(buf, "request_finished_ts", t0 + at(at_ns));
                // SGLang's decode throughput: output tokens after the first over the time after it.
                let decode_s = at(at_ns.saturating_sub(first_ns));
                if completion > 1 && decode_s > 0.0 {
                    secs(buf, "decode_throughput", (completion - 1) as f64 / decode_s);
                }
            }
            if !opts.streamed {
                secs(buf, "response_sent_to_client_ts", t0 + at(at_ns));
            }
        }
        buf.extend_from_slice(b"}}");
    }
}

/// Appends a comma-separated piece to a comma-separated list.
fn append(list: &mut Vec<u8>, piece: &[u8]) {
    if !list.is_empty() && !piece.is_empty() {
        list.push(b',');
    }
    list.extend_from_slice(piece);
}
