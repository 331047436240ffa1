//! The client decodes a streamed event without allocating: 1,024-token streams captured from the
//! mock (SGLang native with cumulative text and `output_ids`, OpenAI completions and chat with usage
//! on every chunk) are fed to `StreamAssembler` one event per read, as a socket delivers them, and
//! every allocation made while it decodes the events after the first few is counted. The rule: an
//! event allocates nothing; what remains is the growth of lists and buffers by doubling, a few
//! allocations each time the stream's length or its largest event doubles.
//!
//! Its own test binary, because the counting allocator (dhat's, in testing mode) is global to the
//! binary.

use bench_client::api::Dialect;
use bench_client::stream::StreamAssembler;
use conformance::streams::{capture, per_event_reads};
use mock_server::{Config, MockServer};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Allocations made (by any thread: the test runs alone in its binary) while `f` runs.
fn count_allocs(f: impl FnOnce()) -> u64 {
    let before = dhat::HeapStats::get().total_blocks;
    f();
    dhat::HeapStats::get().total_blocks - before
}

fn streams() -> Vec<(Dialect, Vec<u8>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut cfg = Config::preset("small-cpu-demo").expect("preset");
        cfg.port = 0;
        cfg.host = "127.0.0.1".into();
        let server = MockServer::start(cfg).await.expect("mock starts");
        let mut out = Vec::new();
        for d in [Dialect::Sglang, Dialect::OpenAi, Dialect::OpenAiChat] {
            out.push((
                d,
                capture(&server.url(), d, 1000, 1024)
                    .await
                    .expect("capture"),
            ));
        }
        server.shutdown().await;
        out
    })
}

#[test]
fn decoding_allocates_with_the_log_of_the_stream_not_per_event() {
    let _profiler = dhat::Profiler::builder().testing().build();
    // The first events size the decoder's buffers.
    const WARM: usize = 8;
    for (dialect, bytes) in streams() {
        let reads = per_event_reads(&bytes);
        let mut a = StreamAssembler::new(dialect);
        for (i, r) in reads[..WARM].iter().enumerate() {
            a.push(r, i as u64);
        }
        let rest = &reads[WARM..];
        let allocs = count_allocs(|| {
            for (i, r) in rest.iter().enumerate() {
                a.push(r, (WARM + i) as u64);
            }
        });
        assert!(
            a.done_ns.is_some(),
            "{dialect:?}: the stream ends with [DONE]"
        );
        let events = rest.len();
        assert!(events >= 300, "{dialect:?}: {events} events");
        // Doubling growth of the chunk list and of the buffers that hold an event (a cumulative
        // SGLang event grows with the output: 0.5 KB to 13 KB here): a few per doubling.
        let bound = 3 * events.ilog2() as u64;
        assert!(
            allocs <= bound,
            "{dialect:?}: {allocs} allocations over {events} events (at most {bound})"
        );
    }
}
