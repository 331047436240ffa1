//! The binary as a user meets it: bad usage is refused before anything starts, with one line that
//! names the flag and the documented exit code; runs end with the code of what happened.

mod support;
use support::{refused_usage as refused, run, stderr};

#[test]
fn bad_flags_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = out.to_str().unwrap();
    refused(&["sweep", "--url", "notaurl", "--out", o], "--url", &out);
    refused(&["sweep", "--url", "ftp://h:1", "--out", o], "--url", &out);

    refused(&["sweep", "--runs", "0", "--out", o], "--runs", &out);
    // A plot that cannot be written is refused before the sweep, not after it: under a file, or
    // in a folder where no file can be made.
    let file = dir.path().join("afile");
    std::fs::write(&file, "").unwrap();
    let under = file.join("x.svg");
    let sweep = ["sweep", "--simulate", "--out", o, "--plot"];
    refused(
        &[&sweep[..], &[under.to_str().unwrap()]].concat(),
        "--plot",
        &out,
    );
    if cfg!(target_os = "linux") {
        refused(&[&sweep[..], &["/proc/x.svg"]].concat(), "--plot", &out);
    }
    let load = ["load", "--concurrency", "1", "--num-requests", "1"];
    // A shard past the last request would write nothing and exit 0.
    let sharded = ["--shard", "5/8", "--out", o];
    refused(&[&load[..], &sharded[..]].concat(), "--shard", &out);
    // Prefix flags that would be ignored.
    refused(
        &[&load[..], &["--prefix-len", "500", "--out", o]].concat(),
        "--prefix-len",
        &out,
    );
    let trace = support::fixture("traces", "mooncake-conversation-300.jsonl");
    let traced = [
        "--trace",
        trace.to_str().unwrap(),
        "--prefix-groups",
        "2",
        "--out",
        o,
    ];
    refused(
        &[&["load"][..], &traced[..]].concat(),
        "--prefix-groups",
        &out,
    );
    // A time past 30 days is a typo, and would overflow the clock.
    let long = [
        "load",
        "--concurrency",
        "2",
        "--duration",
        "1e20",
        "--out",
        o,
    ];
    refused(&long, "--duration", &out);
    let n = ["--num-requests", "2", "--total-timeout-s", "1e300"];
    refused(
        &[&long[..3], &n[..], &long[5..]].concat(),
        "--total-timeout-s",
        &out,
    );
    // A start more than 30 days ahead (a wrong year, or ns for ms). On the engine path, which
    // would not wait for it: refused all the same.
    let far = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 31 * 86_400_000)
        .to_string();
    for at in [far.as_str(), "18446744073709551615"] {
        refused(
            &[
                &long[..3],
                &["--simulate", "--num-requests", "1", "--start-at", at],
                &long[5..],
            ]
            .concat(),
            "--start-at",
            &out,
        );
    }
    refused(
        &["sweep", "--output-tokens", "0", "--out", o],
        "--output-tokens",
        &out,
    );
    refused(
        &["sweep", "--contexts", "abc", "--out", o],
        "--contexts",
        &out,
    );
    refused(
        &[
            "sweep",
            "--token-id-min",
            "5",
            "--token-id-max",
            "5",
            "--out",
            o,
        ],
        "--token-id-min",
        &out,
    );
    refused(
        &[
            "sweep",
            "--method",
            "two-point",
            "--two-point-a",
            "3",
            "--two-point-b",
            "2",
            "--out",
            o,
        ],
        "--two-point-a",
        &out,
    );
    refused(
        &["sweep", "--ttft-timeout-s=0", "--out", o],
        "--ttft-timeout-s",
        &out,
    );
    refused(
        &[
            "load",
            "--concurrency",
            "1",
            "--num-requests",
            "1",
            "--slo",
            "ttft=500",
            "--slo-target",
            "1.5",
            "--out",
            o,
        ],
        "--slo-target",
        &out,
    );
    refused(
        &[
            "load",
            "--concurrency",
            "0",
            "--num-requests",
            "1",
            "--out",
            o,
        ],
        "--concurrency",
        &out,
    );
    refused(
        &[
            "load",
            "--concurrency",
            "1",
            "--num-requests",
            "1",
            "--input-len",
            "x",
            "--out",
            o,
        ],
        "--input-len",
        &out,
    );
    refused(
        &[
            "load",
            "--concurrency",
            "1",
            "--num-requests",
            "1",
            "--slo",
            "ttft=-1",
            "--out",
            o,
        ],
        "--slo",
        &out,
    );
    for cmd in ["load", "capacity"] {
        refused(
            &[cmd, "--simulate", "--slo", "ttft_p99=500", "--out", o],
            "--slo",
            &out,
        );
    }
    refused(
        &[
            "load",
            "--url",
            "http://",
            "--concurrency",
            "1",
            "--num-requests",
            "1",
            "--out",
            o,
        ],
        "--url",
        &out,
    );
}

#[test]
fn an_empty_item_in_a_comma_list_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = out.to_str().unwrap();
    let load = [
        "load",
        "--simulate",
        "--concurrency",
        "1",
        "--num-requests",
        "1",
    ];
    for (args, flag) in [
        (
            vec!["sweep", "--simulate", "--contexts", "1k,,2k"],
            "--contexts",
        ),
        (
            vec!["sweep", "--simulate", "--contexts", "1k,2k,"],
            "--contexts",
        ),
        (
            vec!["sweep", "--simulate", "--contexts", ",1k"],
            "--contexts",
        ),
        (
            [&load[..], &["--slo", "ttft=500,,tpot=50"]].concat(),
            "--slo",
        ),
        (
            vec![
                "capacity",
                "--simulate",
                "--slo",
                "ttft=500",
                "--rates",
                "1, ,2",
            ],
            "--rates",
        ),
    ] {
        let args: Vec<&str> = args.into_iter().chain(["--out", o]).collect();
        let err = stderr(&support::refused_before_start(&args, flag, &out));
        assert!(
            err.starts_with(&format!("error: {flag}: ")) && err.contains("has an empty item"),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    // predict's grid writes nothing: refused all the same.
    for (args, flag) in [
        (
            ["--isl", "1k,,2k", "--osl", "128", "--concurrency", "1"],
            "--isl",
        ),
        (
            ["--isl", "1k", "--osl", "128,", "--concurrency", "1"],
            "--osl",
        ),
        (
            ["--isl", "1k", "--osl", "128", "--concurrency", "1,,4"],
            "--concurrency",
        ),
    ] {
        let r = run(&[&["predict"][..], &args[..]].concat());
        let err = stderr(&r);
        assert_eq!(r.status.code(), Some(64), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("error: {flag}: ")) && err.contains("has an empty item"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_start_at_ahead_is_said_on_one_line_before_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    // Over HTTP on the paused clock: the wait passes at once, and is said all the same.
    let at = (now_ms + 3 * 3_600_000).to_string();
    let o = run(&[
        "load",
        "--simulate-http",
        "--concurrency",
        "1",
        "--num-requests",
        "1",
        "--start-at",
        &at,
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("--start-at: waiting "))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].contains(" h, until ") && said[0].ends_with("Z, before the first request"),
        "{err}"
    );
}

#[test]
fn huge_and_tiny_values_are_shown_in_e_notation() {
    // A value of 1e300 written out is 301 digits: messages show it as given.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = out.to_str().unwrap();
    let trace = support::fixture("traces", "mooncake-conversation-300.jsonl");
    let t = trace.to_str().unwrap();
    let load = ["load", "--simulate", "--num-requests", "2"];
    let cap = ["capacity", "--simulate", "--slo", "ttft=500"];
    for (args, shown) in [
        (
            [&load[..], &["--request-rate", "1e300"]].concat(),
            "got 1e300",
        ),
        (
            [&load[..], &["--request-rate=-1e300"]].concat(),
            "got -1e300",
        ),
        (
            [&load[..], &["--request-rate", "1e-300"]].concat(),
            "got 1e-300",
        ),
        (
            [
                &load[..],
                &[
                    "--request-rate",
                    "1",
                    "--arrival",
                    "gamma",
                    "--burstiness=-1e300",
                ],
            ]
            .concat(),
            "got -1e300",
        ),
        (
            vec!["load", "--simulate", "--trace", t, "--trace-speedup=-1e300"],
            "got -1e300",
        ),
        (
            vec!["load", "--simulate", "--trace", t, "--trace-scale=-1e300"],
            "got -1e300",
        ),
        ([&cap[..], &["--rates", "1,1e300"]].concat(), "got 1e300"),
        ([&cap[..], &["--start=-1e300"]].concat(), "got -1e300"),
        ([&cap[..], &["--factor=-1e300"]].concat(), "got -1e300"),
        (
            [&cap[..], &["--factor", "1e300"]].concat(),
            "reaches 1e300 req/s",
        ),
        ([&cap[..], &["--max-failed", "1e300"]].concat(), "got 1e300"),
        (
            [&cap[..], &["--throughput-tolerance", "1e300"]].concat(),
            "got 1e300",
        ),
        ([&cap[..], &["--slo-target", "1e300"]].concat(), "got 1e300"),
    ] {
        let args: Vec<&str> = args.into_iter().chain(["--out", o]).collect();
        let r = run(&args);
        let err = stderr(&r);
        assert_eq!(r.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains(shown), "{args:?}: {shown:?} not in {err}");
        assert!(err.len() < 300, "{args:?}: {err}");
        assert!(!out.exists(), "{args:?}");
    }
}

#[test]
fn clap_usage_errors_exit_64_and_help_exits_0() {
    let o = run(&["sweep", "--no-such-flag"]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(stderr(&o).contains("--no-such-flag"));
    let o = run(&["sweep", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("--contexts"));
}

#[test]
fn an_existing_results_file_is_refused_without_resume() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    std::fs::write(&out, "{}\n").unwrap();
    let o = run(&["sweep", "--out", out.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(64), "{err}");
    assert!(
        err.contains("--resume") && !err.contains("started the embedded mock"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "{}\n");
}

#[test]
fn unreadable_or_empty_inputs_are_data_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jsonl");
    let o = run(&["report", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let o = run(&["report", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(stderr(&o).contains("no sweep records"), "{}", stderr(&o));
    let o = run(&["merge", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(stderr(&o).contains("no load records"), "{}", stderr(&o));
}

#[test]
fn a_sweep_of_a_server_that_is_not_there_exits_2_and_keeps_its_records() {
    // Nothing listens on a port just bound and closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let url = format!("http://127.0.0.1:{port}");
    let o = run(&[
        "sweep",
        "--url",
        &url,
        "--api",
        "sglang",
        "--contexts",
        "64",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--output-tokens",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("sweep stopped"), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("connect-refused"), "{text}");
}

#[test]
fn a_sweep_that_succeeds_exits_0_and_a_resume_says_what_it_skipped_on_its_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = out.to_str().unwrap();
    let args = [
        "sweep",
        "--contexts",
        "64",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--output-tokens",
        "4",
        "--out",
        o,
    ];
    let first = run(&args);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(
        !stderr(&first).contains('\u{1b}'),
        "colour codes in a log that is not a terminal"
    );
    let mut again = args.to_vec();
    again.push("--resume");
    let second = run(&again);
    let err = stderr(&second);
    assert_eq!(second.status.code(), Some(0), "{err}");
    assert!(
        err.lines()
            .any(|l| l == format!("--resume: skipped 1 points already in {o}")),
        "{err:?}"
    );
}

#[test]
fn a_sweep_whose_requests_fail_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    // The mock's context is shorter than the prompt: every request gets a 400.
    let o = run(&[
        "sweep",
        "--contexts",
        "64",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--output-tokens",
        "4",
        "--mock-set",
        "context_length=32",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("1 of 1 records written this run failed"),
        "{err}"
    );
}

#[test]
fn simulate_is_refused_with_a_url() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    refused(
        &[
            "sweep",
            "--simulate",
            "--url",
            "http://127.0.0.1:30000",
            "--out",
            out.to_str().unwrap(),
        ],
        "--simulate",
        &out,
    );
}

#[test]
fn the_story_replays_as_a_simulated_what_if() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kimi.jsonl");
    let o = out.to_str().unwrap();
    let base = [
        "sweep",
        "--simulate",
        "--preset",
        "kimi-k2.6-dflash-8xrtx-pro-6000",
        "--contexts",
        "1k,4k,16k,32k,64k,185k",
        "--output-tokens",
        "16",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--out",
        o,
    ];
    // mem_fraction_static 0.94: the prefill spike at 32k meets too little free memory.
    let crash = run(&base);
    let err = stderr(&crash);
    assert_eq!(crash.status.code(), Some(2), "{err}");
    assert!(
        err.contains("CUDA out of memory") && err.contains("simulated run"),
        "{err}"
    );
    let manifest = std::fs::read_to_string(format!("{o}.manifest.jsonl")).unwrap();
    assert!(manifest.contains("\"simulated\":true"), "{manifest}");
    // 0.93, chunked prefill 4096 and expandable segments: the rest of the sweep, to 185k.
    let mut fixed = base.to_vec();
    fixed.extend([
        "--mock-set",
        "mem_fraction_static=0.93",
        "--mock-set",
        "chunked_prefill_size=4096",
        "--mock-set",
        "expandable_segments=true",
        "--resume",
    ]);
    let done = run(&fixed);
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let text = std::fs::read_to_string(&out).unwrap();
    let ok_at = |ctx: u32| {
        text.lines().any(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["context_tokens"] == ctx && v["error"].is_null()
        })
    };
    for ctx in [1000, 4000, 16_000, 32_000, 64_000, 185_000] {
        assert!(ok_at(ctx), "no successful record at {ctx}");
    }
}

#[test]
fn report_draws_the_slo_of_the_load_run_or_of_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("load.jsonl");
    let r = results.to_str().unwrap();
    let o = run(&[
        "load",
        "--simulate",
        "--concurrency",
        "4",
        "--num-requests",
        "40",
        "--input-len",
        "512",
        "--output-len",
        "32",
        "--slo",
        "ttft=200,tpot=20",
        "--out",
        r,
        "--no-progress",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = dir.path().join("load.svg");
    let s = svg.to_str().unwrap();
    // The run's own SLO, from its manifest.
    let o = run(&["report", r, "--plot", s]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("TTFT SLO 200 ms") && text.contains("TPOT SLO 20 ms"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("ttft <= 200.0 ms"));
    // --slo replaces it.
    let o = run(&["report", r, "--slo", "ttft=300", "--plot", s]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("TTFT SLO 300 ms") && !text.contains("TPOT SLO"));
    let bad = dir.path().join("bad.svg");
    refused(
        &[
            "report",
            r,
            "--slo",
            "ttft=fast",
            "--plot",
            bad.to_str().unwrap(),
        ],
        "--slo",
        &bad,
    );
}

#[test]
fn a_glob_of_a_results_folder_reads_each_manifest_with_its_results_file() {
    // `results/*.jsonl` matches `RUN.jsonl.manifest.jsonl` too: report, merge and compare read
    // the manifest with its results file, not as results.
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("load.jsonl");
    let r = results.to_str().unwrap();
    let o = run(&[
        "load",
        "--simulate",
        "--concurrency",
        "2",
        "--num-requests",
        "10",
        "--input-len",
        "64",
        "--output-len",
        "8",
        "--out",
        r,
        "--no-progress",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let manifest = format!("{r}.manifest.jsonl");
    for args in [
        vec!["report", r, &manifest],
        vec!["merge", r, &manifest],
        vec!["compare", "--base", r, &manifest, "--new", r, &manifest],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("skipped 1 manifest files given beside their results files"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn a_folder_or_a_device_as_out_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("results");
    std::fs::create_dir(&folder).unwrap();
    let f = folder.to_str().unwrap();
    // A results file under a file: no folder can be made there.
    let file = dir.path().join("afile");
    std::fs::write(&file, "").unwrap();
    let under = file.join("x.jsonl");
    let u = under.to_str().unwrap();
    let not_a_folder = format!("{} is a file, not a folder", file.display());
    let sim = ["--simulate", "--no-progress"];
    for (args, says) in [
        (
            vec![
                "load",
                "--concurrency",
                "2",
                "--num-requests",
                "4",
                "--out",
                u,
            ],
            not_a_folder.as_str(),
        ),
        (
            vec!["sweep", "--contexts", "1k", "--runs", "1", "--out", u],
            not_a_folder.as_str(),
        ),
        (
            vec!["capacity", "--slo", "ttft=100", "--out", u],
            not_a_folder.as_str(),
        ),
        (
            vec![
                "load",
                "--concurrency",
                "2",
                "--num-requests",
                "4",
                "--out",
                f,
            ],
            "a folder",
        ),
        (
            vec!["sweep", "--contexts", "1k", "--runs", "1", "--out", f],
            "a folder",
        ),
        (
            vec!["capacity", "--slo", "ttft=100", "--out", f],
            "a folder",
        ),
        (
            vec![
                "load",
                "--concurrency",
                "2",
                "--num-requests",
                "4",
                "--out",
                "/dev/null",
            ],
            "a device",
        ),
    ] {
        let args: Vec<&str> = args.into_iter().chain(sim).collect();
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        assert!(
            err.starts_with("error: --out ") && err.contains(says),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    // Nothing was written, in the folder or beside it.
    assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    assert!(file.is_file());
}

#[test]
fn report_and_compare_refuse_an_output_under_a_file_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    let r = res.to_str().unwrap();
    let o = run(&[
        "load",
        "--simulate",
        "--no-progress",
        "--no-saturation",
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--out",
        r,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let file = dir.path().join("afile");
    std::fs::write(&file, "").unwrap();
    let under = file.join("p.svg");
    let u = under.to_str().unwrap();
    let before: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    for (args, flag) in [
        (vec!["report", r, "--plot", u], "--plot"),
        (vec!["report", r, "--html", u], "--html"),
        (vec!["compare", r, r, "--plot", u], "--plot"),
        (vec!["compare", r, r, "--html", u], "--html"),
    ] {
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
        let says = format!(
            "error: {flag} {u}: {} is a file, not a folder",
            file.display()
        );
        assert!(err.starts_with(&says), "{args:?}: {err}");
        // Said before reading: no summary was printed.
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), before.len());
    assert!(file.is_file());
}

#[test]
fn a_table_preset_says_where_a_run_on_it_parts_from_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let small = [
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--input-len",
        "64",
    ];
    let notes = |preset: &str| {
        let out = dir.path().join(format!("{preset}.jsonl"));
        let o = run(&[
            &["load", "--simulate", "--no-saturation", "--preset", preset][..],
            &small[..],
            &["--output-len", "4", "--out", out.to_str().unwrap()][..],
        ]
        .concat());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stderr(&o)
    };
    // vLLM's scheduler mixes prefill and decode in one pass: its rows' loops spread their lengths.
    let vllm = notes("llama-3.1-70b-fp8-h200-tp2-vllm");
    assert!(
        vllm.contains("past those rows the model extrapolates"),
        "{vllm}"
    );
    assert!(vllm.contains("output lengths spread by 25%"), "{vllm}");
    let sglang = notes("qwen3-32b-h100-tp2-sglang");
    assert!(
        sglang.contains("past those rows the model extrapolates"),
        "{sglang}"
    );
    assert!(!sglang.contains("spread by"), "{sglang}");
    assert!(!notes("small-cpu-demo").contains("note: this preset"));
}
