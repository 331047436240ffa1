//! `client-overhead`: the client's TTFT against ground truth, one stream at a time and 1,000 at once.

use anyhow::Result;
use bench_client::net;
use bench_client::plan::prompt::{Prompt, PromptGen};
use bench_client::plan::{RequestSpec, Timeouts};
use bench_client::trace::RequestTrace;
use serde_json::json;

use crate::client::{
    bench_stamping, closed_loop, multi_thread_runtime, stamp_sent, stamping_name, target,
};
use crate::lags::{lags, overhead_rows};
use crate::mock::Mock;
use crate::report::Report;
use crate::DEMO;

const SEQUENTIAL: usize = 300;
const CONCURRENT: usize = 1000;
const ROUNDS: usize = 6;

pub(crate) fn run(external: bool) -> Result<Report> {
    let rt = multi_thread_runtime()?;
    rt.block_on(async {
        let mut r = Report::for_mock("client-overhead", external);
        let http = net::http_client_with(&Timeouts::default(), bench_stamping())?;

        // One stream at a time.
        let mock = Mock::start(DEMO, &[], external).await?;
        r.note(format!(
            "mock: {}; preset {DEMO}; client stamping: {} (PERF_CLIENT_STAMPING); overhead = client \
             TTFT minus ground-truth TTFT (from the request's arrival at the mock's socket, the \
             kernel's receive timestamp, to the mock's hand-off of the first chunk to the connection, \
             sent_ns). The client's TTFT runs from its send (socket stamping: the write of the \
             request's first byte; task stamping: the hand-off to reqwest) to the first chunk's \
             arrival (kernel stamping: the kernel's receive timestamp of the read that brought it; \
             socket: that read; task: the request task's turn). The time the request waited in the \
             mock's socket is server time",
            mock.label(),
            stamping_name()
        ));
        let t = target(mock.url());
        let gen = PromptGen::new(11);
        let mut seq = Vec::new();
        for i in 0..(SEQUENTIAL + 10) {
            let spec = RequestSpec::new(
                format!("seq-{i}"),
                Prompt::TokenIds(gen.token_ids(256, i as u64)),
                8,
            );
            let (tr, sent) = net::send_traced(&http, &t, &spec, &Timeouts::default()).await;
            stamp_sent(&tr, sent);
            // The first ten requests warm the connection and are not measured.
            if i >= 10 {
                seq.push(tr);
            }
        }
        let l1 = lags(&mock, &http, &seq).await?;
        mock.stop().await;
        overhead_rows(
            &mut r,
            &format!("1 stream ({SEQUENTIAL} sequential requests, 256-token prompt, 8 tokens)"),
            "p99 < 1 ms",
            &l1,
        );
        r.row("failed requests (1 stream)", "0", format!("{}", l1.failed));

        // Many streams at once: a closed loop of CONCURRENT workers, each sending ROUNDS requests
        // back to back. The first round starts all streams at one instant (a synchronized burst
        // of connections, uploads and first chunks); later rounds are the steady state of
        // CONCURRENT streams in flight, where the target applies. Both are reported.
        let sets = [("max_running_requests", CONCURRENT.to_string())];
        let mock = Mock::start(DEMO, &sets, external).await?;
        let t = target(mock.url());
        let rounds = closed_loop(&http, &t, "conc", CONCURRENT, ROUNDS, 256, 32).await?;
        let burst: Vec<RequestTrace> = rounds.iter().filter(|(k, _)| *k == 0).map(|(_, tr)| tr.clone()).collect();
        let steady: Vec<RequestTrace> = rounds.iter().filter(|(k, _)| *k > 0).map(|(_, tr)| tr.clone()).collect();
        let lb = lags(&mock, &http, &burst).await?;
        let lc = lags(&mock, &http, &steady).await?;
        mock.stop().await;
        overhead_rows(
            &mut r,
            &format!(
                "{CONCURRENT} concurrent streams, steady state (closed loop of {CONCURRENT} \
                 workers, rounds 2..{ROUNDS}, 256-token prompt, 16 to 48 tokens, \
                 max_running_requests = {CONCURRENT})"
            ),
            "p99 < 5 ms",
            &lc,
        );
        r.dist_row(
            format!("overhead, first round ({CONCURRENT} streams started at one instant)"),
            "-",
            &lb.first_wire,
        );
        r.dist_row(
            format!("every chunk's lag at {CONCURRENT} streams, steady state (from the client's send; includes the request's way in)"),
            "-",
            &lc.all,
            );
        r.dist_row(
            format!("every chunk's delivery at {CONCURRENT} streams, steady state (client arrival - mock emission on the shared real-time clock)"),
            "-",
            &lc.delivery_ms,
        );
        r.dist_row(
            format!("the mock's pacing error per chunk at {CONCURRENT} streams, steady state (sent - modelled)"),
            "-",
            &lc.pacing_ms,
        );
        r.row(
            format!("failed requests ({CONCURRENT} streams)"),
            "0",
            format!("{}", lc.failed + lb.failed),
        );
        r.set_dist("concurrent_first_round", &lb.first_wire);
        r.set_dist("one_stream", &l1.first_wire);
        r.set_dist("concurrent_first", &lc.first_wire);
        r.set_dist("one_stream_from_handler", &l1.first);
        r.set_dist("concurrent_first_from_handler", &lc.first);
        r.set_dist("concurrent_intake", &lc.intake_ms);
        r.set_dist("concurrent_all_chunks", &lc.all);
        r.set("external", json!(external));
        Ok(r)
    })
}
