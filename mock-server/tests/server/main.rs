//! Integration tests of the mock: a real socket on 127.0.0.1 and a real HTTP client on tokio's
//! paused clock, the router without a socket (`handlers`), and the engine without HTTP
//! (`engine`). One test binary; helpers in `common`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod connections;
mod engine;
mod faults;
mod handlers;
mod info;
mod lifecycle;
mod responses;
mod serving;
mod sockets;
