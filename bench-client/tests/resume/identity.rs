//! Runs that know their own identity: `merge` counts each request of one run once (a file given
//! twice, a copy, or a run of other flags is refused with exit 65, while the shards of one run
//! still merge); a second writer on a results file is refused (exit 64) before it sends anything;
//! and a run resumed after a kill spans the sum of its pieces, not the time it was down.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{json, lines, run, stderr};
use bench_client::results::read_records;
use mock_server::{Config, MockServer};

/// A load run on the engine path (exact virtual time) into `out`, with extra flags.
fn simulate(out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "load",
        "--simulate",
        "--request-rate",
        "100",
        "--format",
        "json",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    o
}

fn merge(files: &[&Path]) -> std::process::Output {
    let mut args = vec!["merge", "--format", "json"];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    run(&args)
}

#[test]
fn merge_of_one_file_twice_or_of_its_copy_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.jsonl");
    simulate(&a, &["--num-requests", "40", "--seed", "3"]);
    let once = merge(&[&a]);
    assert_eq!(once.status.code(), Some(0), "{}", stderr(&once));
    assert_eq!(json(&once)["requests"], 40);

    let twice = merge(&[&a, &a]);
    assert_eq!(twice.status.code(), Some(65), "{}", stderr(&twice));
    assert!(
        stderr(&twice).contains("is given twice"),
        "{}",
        stderr(&twice)
    );
    assert!(twice.stdout.is_empty());

    // A copy of the results alone (no manifest beside it) is the same requests.
    let copy = dir.path().join("copy.jsonl");
    std::fs::copy(&a, &copy).unwrap();
    let o = merge(&[&a, &copy]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(stderr(&o).contains("and again in"), "{}", stderr(&o));
}

#[test]
fn merge_of_unrelated_runs_is_refused_and_shards_of_one_run_still_merge() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    simulate(&a, &["--num-requests", "30", "--seed", "1"]);
    simulate(&b, &["--num-requests", "30", "--seed", "2"]);
    let o = merge(&[&a, &b]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("merge joins the shards of one run"),
        "{}",
        stderr(&o)
    );

    // Two runs with the same flags are the same requests twice.
    let again = dir.path().join("again.jsonl");
    simulate(&again, &["--num-requests", "30", "--seed", "1"]);
    let o = merge(&[&a, &again]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));

    // The shards of one run, each launched on its own (as `merge shard-*.jsonl` gives them, each
    // manifest beside its results file).
    let shards: Vec<_> = (0..2)
        .map(|i| dir.path().join(format!("shard-{i}.jsonl")))
        .collect();
    for (i, s) in shards.iter().enumerate() {
        simulate(
            s,
            &[
                "--num-requests",
                "30",
                "--seed",
                "1",
                "--shard",
                &format!("{i}/2"),
            ],
        );
    }
    let manifests: Vec<_> = shards
        .iter()
        .map(|s| dir.path().join(format!("{}.manifest.jsonl", s.display())))
        .collect();
    let mut all: Vec<&Path> = shards.iter().map(|p| p.as_path()).collect();
    all.extend(manifests.iter().map(|p| p.as_path()));
    let o = merge(&all);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json(&o)["requests"], 30);
}

/// Throughput (successful requests per second of the run's span) of a results file.
fn throughput(path: &Path) -> f64 {
    let o = merge(&[path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["requests"], 2000, "{v}");
    v["derived"]["request_throughput"].as_f64().unwrap()
}

#[test]
fn a_resumed_run_spans_its_pieces_not_the_time_it_was_down() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--num-requests", "2000", "--seed", "7"];
    let whole = dir.path().join("whole.jsonl");
    simulate(&whole, &flags);
    let uninterrupted = throughput(&whole);

    // The first piece ran long ago (its start fixed in 2001) and was killed after 800 records;
    // the resumed piece runs now.
    let part = dir.path().join("part.jsonl");
    let mut first = flags.to_vec();
    first.extend(["--start-at", "1000000000000"]);
    simulate(&part, &first);
    let text = std::fs::read_to_string(&part).unwrap();
    let kept: String = text.lines().take(800).map(|l| format!("{l}\n")).collect();
    std::fs::write(&part, kept).unwrap();
    let mut resume = flags.to_vec();
    resume.push("--resume");
    simulate(&part, &resume);
    assert_eq!(read_records(&part).unwrap().len(), 2000);

    // The requests in flight at the kill are sent again: a few percent, not the years between.
    let resumed = throughput(&part);
    assert!(
        (resumed - uninterrupted).abs() / uninterrupted < 0.03,
        "resumed {resumed:.2} req/s, uninterrupted {uninterrupted:.2} req/s"
    );
}

#[test]
fn a_second_writer_on_one_results_file_is_refused_before_it_sends() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut c = Config::preset("small-cpu-demo").unwrap();
    c.port = 0;
    c.host = "127.0.0.1".into();
    let server = rt.block_on(MockServer::start(c)).unwrap();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("load.jsonl");
    let out_s = out.to_str().unwrap().to_string();
    // Real time: 600 requests at 200 a second keep the first writer busy for 3 s.
    let args = |resume: bool| {
        let mut a = vec![
            "load",
            "--url",
            &url,
            "--num-requests",
            "600",
            "--request-rate",
            "200",
            "--input-len",
            "64",
            "--output-len",
            "16",
            "--seed",
            "5",
            "--out",
            &out_s,
        ];
        if resume {
            a.push("--resume");
        }
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let mut first = Command::new(crate::support::BIN)
        .args(args(false))
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(&out) < 20 {
        assert!(
            Instant::now() < deadline,
            "the first writer wrote too few records"
        );
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first writer ended early"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = run(&args(true).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first writer ended before the second was refused: the test proves nothing"
    );
    assert_eq!(second.status.code(), Some(64), "{}", stderr(&second));
    assert!(
        stderr(&second).contains("is being written by another bench-client"),
        "{}",
        stderr(&second)
    );
    assert!(first.wait().unwrap().success());
    // The second writer sent nothing: the server saw the first run's 600 requests only.
    assert_eq!(server.truth().all().len(), 600);
    let mut idx: Vec<u64> = read_records(&out)
        .unwrap()
        .iter()
        .map(|r| r.load.as_ref().unwrap().index)
        .collect();
    idx.sort_unstable();
    assert_eq!(
        idx,
        (0..600).collect::<Vec<_>>(),
        "every index exactly once"
    );
    rt.block_on(server.shutdown());
}
