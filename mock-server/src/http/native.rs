//! The native dialect's JSON (`/generate`), written directly into a buffer.

use super::render::{Collected, Renderer};
use crate::engine::Finish;
use crate::tokenizer;

impl Renderer {
    /// One native event (or the non-streaming answer) as JSON, written directly: this is the
    /// hot path at thousands of streams, and cumulative output makes every event longer.
    pub(super) fn native(&mut self, buf: &mut Vec<u8>, o: &Collected) {
        use std::io::Write;
        let (new_ids, cached, completion) = (&o.ids[..], o.cached, o.completion);
        let (finish, speculative, at_ns) = (&o.finish, &o.speculative, o.at_ns);
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
        let (ids, text): (&[u8], &[u8]) = if self.incremental {
            (&new_ids_json, new_text)
        } else {
            if !self.ids_json.is_empty() && !new_ids_json.is_empty() {
                self.ids_json.push(b',');
            }
            self.ids_json.extend_from_slice(&new_ids_json);
            self.text_json.extend_from_slice(new_text);
            (&self.ids_json, &self.text_json)
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
            ",\"prompt_tokens\":{},\"completion_tokens\":{completion},\"cached_tokens\":{cached}",
            self.prompt_tokens
        );
        if finish.is_some() {
            buf.extend_from_slice(b",\"e2e_latency\":");
            // The instant the engine handed the final chunk over.
            let _ = serde_json::to_writer(&mut *buf, &(at_ns as f64 / 1e9));
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
        }
        buf.extend_from_slice(b"},\"index\":0}");
    }
}
