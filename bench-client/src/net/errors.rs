//! Error classes: a transport error becomes the [`StreamEnd`] that names what broke.

use crate::trace::{StreamEnd, TimeoutPhase};

/// An error's message with its sources, and what its sources say of the connection.
pub(super) struct ErrorChain {
    /// The messages of the error and of each source that adds to it, joined by `: `.
    pub(super) text: String,
    /// Some source was a refused connection.
    pub(super) refused: bool,
    /// Some source was a connect past its deadline.
    pub(super) timed_out: bool,
}

/// The [`ErrorChain`] of `e`.
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> ErrorChain {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut refused = false;
    let mut timed_out = false;
    let mut text = e.to_string();
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            refused |= io.kind() == std::io::ErrorKind::ConnectionRefused;
            timed_out |= io.kind() == std::io::ErrorKind::TimedOut;
        }
        let st = s.to_string();
        if !text.contains(&st) {
            text = format!("{text}: {st}");
        }
        src = s.source();
    }
    ErrorChain {
        text: super::redact::redact_text(&text),
        refused,
        timed_out,
    }
}

/// A reqwest failure.
pub(super) fn classify(e: &reqwest::Error) -> StreamEnd {
    let ErrorChain { text, refused, .. } = error_chain(e);
    if refused {
        StreamEnd::ConnectRefused { message: text }
    } else if e.is_timeout() {
        StreamEnd::Timeout {
            phase: TimeoutPhase::Connect,
        }
    } else if e.is_connect() || e.is_request() {
        StreamEnd::Connect { message: text }
    } else {
        StreamEnd::Reset { message: text }
    }
}

/// A failure before the response headers, on the socket-stamped path.
pub(super) fn classify_wire(e: &hyper_util::client::legacy::Error) -> StreamEnd {
    let ErrorChain {
        text,
        refused,
        timed_out,
    } = error_chain(e);
    if refused {
        StreamEnd::ConnectRefused { message: text }
    } else if timed_out {
        StreamEnd::Timeout {
            phase: TimeoutPhase::Connect,
        }
    } else {
        StreamEnd::Connect { message: text }
    }
}

/// A failure while reading the body: the connection broke.
pub(super) fn body_error(end: StreamEnd) -> StreamEnd {
    match end {
        StreamEnd::Connect { message } => StreamEnd::Reset { message },
        other => other,
    }
}
