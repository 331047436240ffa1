//! The native dialect's JSON (`/generate`), written directly into a buffer, with SGLang 0.5.23's
//! `meta_info`: the fields every event carries, the scheduler's timings with `enable_metrics`,
//! logprobs when asked for, and the finish-only fields on the last event.

use super::render::{Collected, Renderer};
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
    let _ = write!(buf, ",\"{key}\":");
    let _ = serde_json::to_writer(&mut *buf, &v);
}

impl Renderer {
    /// One native event (or the non-streaming answer) as JSON, written directly: this is the
    /// hot path at thousands of streams, and cumulative output makes every event longer.
    pub(super) fn native(&mut self, buf: &mut Vec<u8>, o: &Collected) {
        let (new_ids, cached, completion) = (&o.ids[..], o.cached, o.completion);
        let (finish, speculative, at_ns) = (&o.finish, &o.speculative, o.at_ns);
        let first = self.events == 0;
        self.events += 1;
        if first {
            self.first_at_ns = o.first_at_ns;
        }
        // Only the new tokens are rendered; cumulative output appends them to the JSON kept from
        // the events before (escaping is per character, so escaped pieces concatenate).
        let mut new_ids_json = Vec::with_capacity(new_ids.len() * 6);
        let mut num = itoa::Buffer::new();
        for id in new_ids {
            if !new_ids_json.is_empty() {
                new_ids_json.push(b',');
            }
            new_ids_json.extend_from_slice(num.format(*id).as_bytes());
        }
        let new_text = serde_json::to_vec(&tokenizer::decode(new_ids)).unwrap_or_default();
        let new_text = new_text
            .get(1..new_text.len().saturating_sub(1))
            .unwrap_or_default();
        let mut new_lp = Vec::new();
        if self.logprobs {
            for id in new_ids {
                if !new_lp.is_empty() {
                    new_lp.push(b',');
                }
                let _ = write!(new_lp, "[{:?},{id},null]", logprob(*id));
            }
        }
        let (ids, text, lp): (&[u8], &[u8], &[u8]) = if self.incremental {
            (&new_ids_json, new_text, &new_lp)
        } else {
            append(&mut self.ids_json, &new_ids_json);
            self.text_json.extend_from_slice(new_text);
            append(&mut self.logprobs_json, &new_lp);
            (&self.ids_json, &self.text_json, &self.logprobs_json)
        };
        // Writing into a Vec cannot fail; the results are ignored for that reason.
        buf.extend_from_slice(b"{\"text\":\"");
        buf.extend_from_slice(text);
        buf.extend_from_slice(b"\",\"output_ids\":[");
        buf.extend_from_slice(ids);
        buf.extend_from_slice(b"],\"meta_info\":{\"id\":");
        let _ = serde_json::to_writer(&mut *buf, &self.rid);
        buf.extend_from_slice(b",\"finish_reason\":");
        match finish {
            None => buf.extend_from_slice(b"null"),
            Some(Finish::Length(n)) => {
                let _ = write!(buf, "{{\"type\":\"length\",\"length\":{n}}}");
            }
            Some(Finish::Stop(t)) => {
                let _ = write!(buf, "{{\"type\":\"stop\",\"matched\":{t}}}");
            }
        }
        let _ = write!(
            buf,
            ",\"prompt_tokens\":{},\"weight_version\":\"default\",\"num_retractions\":{}",
            self.prompt_tokens, o.times.retractions
        );
        let t0 = self.received_unix_s;
        let at = |ns: u64| ns as f64 / 1e9;
        if self.metrics {
            buf.extend_from_slice(b",\"storage_prefetch_wait\":0.0,\"storage_staging_wait\":0.0");
            if let Some(ns) = o.times.forward_entry_ns {
                secs(buf, "forward_entry_time", t0 + at(ns));
            }
            if let Some(ns) = o.times.prefill_finished_ns {
                secs(buf, "prefill_finished_time", t0 + at(ns));
            }
            secs(buf, "queue_time", o.times.forward_entry_ns.map_or(0.0, at));
        }
        if self.logprobs {
            buf.extend_from_slice(b",\"input_token_logprobs\":[],\"output_token_logprobs\":[");
            buf.extend_from_slice(lp);
            let _ = write!(buf, "],\"output_token_logprobs_length\":{completion}");
        }
        let _ = write!(
            buf,
            ",\"reasoning_tokens\":0,\"completion_tokens\":{completion},\"cached_tokens\":{cached}"
        );
        if finish.is_some() {
            let _ = write!(
                buf,
                ",\"weight_versions\":[{{\"version\":\"default\",\"start\":0,\"end\":{completion}}}]"
            );
        }
        if cached > 0 {
            let _ = write!(
                buf,
                ",\"cached_tokens_details\":{{\"device\":{cached},\"host\":0}}"
            );
        } else {
            buf.extend_from_slice(b",\"cached_tokens_details\":null");
        }
        buf.extend_from_slice(b",\"dp_rank\":null");
        let first_ns = self.first_at_ns;
        let sent_ts = t0 + at(first_ns);
        if finish.is_none() {
            if first && self.streamed {
                secs(buf, "response_sent_to_client_ts", sent_ts);
            }
        } else {
            // The instant the engine handed the final chunk over.
            secs(buf, "e2e_latency", at(at_ns));
            if let Some(s) = speculative {
                let _ = write!(
                    buf,
                    ",\"spec_verify_ct\":{},\"spec_accept_length\":",
                    s.verify_ct
                );
                let _ = serde_json::to_writer(&mut *buf, &s.accept_length);
                buf.extend_from_slice(b",\"spec_accept_rate\":");
                let _ = serde_json::to_writer(&mut *buf, &s.accept_rate);
                buf.extend_from_slice(b",\"spec_accept_histogram\":");
                let _ = serde_json::to_writer(&mut *buf, &s.histogram);
            }
            if self.metrics {
                secs(buf, "request_received_ts", t0);
                if first_ns > 0 {
                    secs(buf, "first_token_latency", at(first_ns));
                }
                secs(buf, "api_server_dispatch_finish_ts", t0);
                if self.streamed {
                    secs(buf, "response_sent_to_client_ts", sent_ts);
                }
                secs(buf, "request_finished_ts", t0 + at(at_ns));
                // SGLang's decode throughput: output tokens after the first over the time after it.
                let decode_s = at(at_ns.saturating_sub(first_ns));
                if completion > 1 && decode_s > 0.0 {
                    secs(buf, "decode_throughput", (completion - 1) as f64 / decode_s);
                }
            }
            if !self.streamed {
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
