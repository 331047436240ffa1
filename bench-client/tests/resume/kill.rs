//! `kill -9` of the client during a load run against the in-process mock loses no record of a
//! request that had finished 100 ms before the kill (the mock's ground truth says when each stream
//! ended), and `--resume` completes the run with every index exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{lines, unix_ns};

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bench_client::results::read_records;
use mock_server::{Config, MockServer};

const REQUESTS: u64 = 400;

/// `ld-{seed}-{start}-{index}` -> index (warm-up rids end in `w{k}` and give `None`).
fn index_of(rid: &str) -> Option<u64> {
    rid.rsplit('-').next()?.parse().ok()
}

#[test]
fn kill_9_loses_no_finished_record_and_resume_completes_the_run() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut c = Config::preset("small-cpu-demo").unwrap();
    c.port = 0;
    c.host = "127.0.0.1".into();
    // Real time: about 300 requests a second here, so that the 100 ms before the kill hold a
    // minority of the finished requests.
    let server = rt.block_on(MockServer::start(c)).unwrap();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("load.jsonl");
    let out_s = out.to_str().unwrap().to_string();
    let n = REQUESTS.to_string();
    let args = |resume: bool| {
        let mut a = vec![
            "load",
            "--url",
            &url,
            "--num-requests",
            &n,
            "--concurrency",
            "16",
            "--input-len",
            "64",
            "--output-len",
            "32",
            "--seed",
            "7",
            "--out",
            &out_s,
        ];
        if resume {
            a.push("--resume");
        }
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };

    let mut child = Command::new(crate::support::BIN)
        .args(args(false))
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it in the middle of the run, once a third of the records are in the file.
    let deadline = Instant::now() + Duration::from_secs(120);
    while lines(&out) < REQUESTS as usize / 3 {
        assert!(Instant::now() < deadline, "the run wrote too few records");
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed_at = unix_ns();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let kept: BTreeMap<u64, ()> = read_records(&out)
        .unwrap()
        .iter()
        .map(|r| (r.load.as_ref().unwrap().index, ()))
        .collect();
    assert!(
        (kept.len() as u64) < REQUESTS,
        "the kill came after the end"
    );
    // Each stream's end as the mock sent it, on the real-time clock.
    let cutoff = killed_at - 100_000_000;
    let mut finished_before = 0;
    let truths = server.truth().all();
    for t in &truths {
        let Some(index) = index_of(&t.rid) else {
            continue;
        };
        let Some(last) = t.chunks.last().and_then(|c| c.sent_ns) else {
            continue;
        };
        let ended = t.received_unix_ns + last;
        if t.completion_tokens == t.max_new_tokens && ended < cutoff {
            finished_before += 1;
            assert!(
                kept.contains_key(&index),
                "request {index} finished {} ms before the kill and its record is lost",
                (killed_at - ended) / 1_000_000
            );
        }
    }
    assert!(
        finished_before >= 50,
        "only {finished_before} of {} requests finished 100 ms before the kill ({} records kept)",
        truths.len(),
        kept.len()
    );

    let o = crate::support::run(&args(true).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", crate::support::stderr(&o));
    let recs = read_records(&out).unwrap();
    let mut idx: Vec<u64> = recs
        .iter()
        .map(|r| r.load.as_ref().unwrap().index)
        .collect();
    idx.sort_unstable();
    assert_eq!(
        idx,
        (0..REQUESTS).collect::<Vec<_>>(),
        "every index exactly once"
    );
    assert!(recs.iter().all(|r| r.error.is_none()));
    rt.block_on(server.shutdown());
}
