use super::*;

#[test]
fn prometheus_text_parses() {
    let m = parse_prometheus(
        "# HELP x\n# TYPE x counter\nsglang:cached_tokens_total 5\nsglang:prompt_tokens_total{model=\"a b\"} 10\nbad line\nh_bucket{le=\"+Inf\"} 3\n",
    );
    assert_eq!(m.get("sglang:cached_tokens_total"), Some(&5.0));
    assert_eq!(
        m.get("sglang:prompt_tokens_total{model=\"a b\"}"),
        Some(&10.0)
    );
    let d = MetricsDelta {
        before: m.clone(),
        after: parse_prometheus(
            "sglang:cached_tokens_total 8\nsglang:prompt_tokens_total{model=\"a b\"} 16\n",
        ),
        ..MetricsDelta::default()
    };
    let deltas = d.deltas();
    assert_eq!(deltas.get("sglang:cached_tokens_total"), Some(&3.0));
    assert_eq!(deltas.get(CACHE_HIT_RATE), Some(&0.5));
    assert_eq!(by_name(&deltas, "sglang:prompt_tokens_total"), Some(6.0));
    assert_eq!(by_name(&deltas, "sglang:prompt_tokens"), None);
}

#[test]
fn the_hit_rate_gauge_is_shown_as_read_not_differenced() {
    let d = MetricsDelta {
        before: parse_prometheus(
            "sglang:cache_hit_rate{tp_rank=\"0\"} 0.25\nsglang:cached_tokens_total{cache_source=\"device\"} 100\nsglang:prompt_tokens_total 400\n",
        ),
        after: parse_prometheus(
            "sglang:cache_hit_rate{tp_rank=\"0\"} 0.75\nsglang:cached_tokens_total{cache_source=\"device\"} 400\nsglang:prompt_tokens_total 1000\n",
        ),
        ..MetricsDelta::default()
    };
    let deltas = d.deltas();
    assert_eq!(by_name(&deltas, "sglang:cache_hit_rate"), None);
    assert_eq!(deltas.get(CACHE_HIT_RATE), Some(&0.5));
    assert_eq!(d.cache().unwrap().ratio(), Some(0.5));
    let text = d.render();
    assert!(
        text.contains("server prefix cache hit ratio 0.5000: 300 sglang:cached_tokens_total / 600 sglang:prompt_tokens_total"),
        "{text}"
    );
    assert!(
        text.contains("sglang:cache_hit_rate{tp_rank=\"0\"} 0.750000 (a gauge"),
        "{text}"
    );
    let j = d.to_json();
    assert_eq!(j["prefix_cache"]["hit_ratio"], 0.5);
    assert_eq!(
        j["rate_gauges_after"]["sglang:cache_hit_rate{tp_rank=\"0\"}"],
        0.75
    );
}

#[test]
fn gauges_are_read_after_the_run_never_differenced_or_added_across_servers() {
    // A warm server: the acceptance length moved 2.503 -> 2.500 over the run, the running
    // requests 3 -> 0; only the counters have a run's change.
    let scrape = |accept: f64, running: f64, requests: f64| {
        parse_prometheus(&format!(
            "# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{{tp_rank=\"0\"}} {accept}\nsglang:num_running_reqs {running}\nsglang:num_requests_total {requests}\nsglang:e2e_request_latency_seconds_sum 12.5\nsglang:e2e_request_latency_seconds_count {requests}\n"
        ))
    };
    let d = MetricsDelta {
        before: scrape(2.503, 3.0, 100.0),
        after: scrape(2.5, 0.0, 150.0),
        ..MetricsDelta::default()
    };
    let deltas = d.deltas();
    assert_eq!(by_name(&deltas, "sglang:spec_accept_length"), None);
    assert_eq!(by_name(&deltas, "sglang:num_running_reqs"), None);
    assert_eq!(by_name(&deltas, "sglang:num_requests_total"), Some(50.0));
    assert_eq!(
        by_name(&deltas, "sglang:e2e_request_latency_seconds_count"),
        Some(50.0)
    );
    let g = gauges(&d.after);
    assert_eq!(
        g.get("sglang:spec_accept_length{tp_rank=\"0\"}"),
        Some(&2.5)
    );
    assert_eq!(g.get("sglang:num_running_reqs"), Some(&0.0));
    let text = d.render();
    assert!(!text.contains("-0.003"), "{text}");
    assert!(text.contains("gauges, as read after the run"), "{text}");
    assert_eq!(
        d.to_json()["gauges_after"]["sglang:spec_accept_length{tp_rank=\"0\"}"],
        2.5
    );

    // Two servers, each with its own gauge: kept apart, not summed.
    let shard = |url: &str, accept: f64| ShardMetrics {
        kind: MANIFEST_KIND.into(),
        url: url.into(),
        shard: "1/1".into(),
        seed: 1,
        start_unix_ms: 0,
        delta: MetricsDelta {
            before: scrape(accept, 0.0, 0.0),
            after: scrape(accept, 0.0, 10.0),
            before_unix_ms: 0,
            after_unix_ms: 10,
        },
    };
    let merged = merge(&[
        (PathBuf::from("a.jsonl"), vec![shard("http://a", 2.49)]),
        (PathBuf::from("b.jsonl"), vec![shard("http://b", 2.5)]),
    ]);
    let md = merged.deltas();
    assert_eq!(by_name(&md, "sglang:spec_accept_length"), None);
    assert_eq!(by_name(&md, "sglang:num_requests_total"), Some(20.0));
    let mg = merged.gauges();
    assert_eq!(
        mg.get("sglang:spec_accept_length{tp_rank=\"0\"} at http://a"),
        Some(&2.49)
    );
    assert_eq!(
        mg.get("sglang:spec_accept_length{tp_rank=\"0\"} at http://b"),
        Some(&2.5)
    );
    assert!(!merged.render().contains("4.99"), "{}", merged.render());
}

fn pair(shard: &str, url: &str, b: (u64, f64), a: (u64, f64)) -> ShardMetrics {
    let m = |v: f64| BTreeMap::from([("c_total".to_string(), v)]);
    ShardMetrics {
        kind: MANIFEST_KIND.into(),
        url: url.into(),
        shard: shard.into(),
        seed: 1,
        start_unix_ms: 0,
        delta: MetricsDelta {
            before: m(b.1),
            after: m(a.1),
            before_unix_ms: b.0,
            after_unix_ms: a.0,
        },
    }
}

#[test]
fn overlapping_shards_of_one_server_count_once_and_disjoint_windows_add() {
    // Two shards on one server: each saw the other's 10 requests (20 in each window).
    let f = |n: &str| PathBuf::from(n);
    let a = pair("0/2", "http://s", (100, 5.0), (900, 25.0));
    let b = pair("1/2", "http://s", (120, 5.0), (950, 25.0));
    // A resumed invocation of shard 0 later: 7 more.
    let a2 = pair("0/2", "http://s", (2000, 30.0), (2500, 37.0));
    // Another server: 4.
    let c = pair("0/1", "http://t", (100, 0.0), (900, 4.0));
    let m = merge(&[
        (f("a"), vec![a, a2]),
        (f("b"), vec![b]),
        (f("c"), vec![c]),
        (f("d"), vec![]),
    ]);
    assert_eq!(m.deltas()["c_total"], 20.0 + 7.0 + 4.0);
    assert_eq!(m.servers.len(), 2);
    assert_eq!(m.servers[0].windows.len(), 2);
    assert_eq!(m.servers[0].windows[0].shards, vec!["0/2", "1/2"]);
    // Summing per shard would have said 20 + 20 + 7 + 4.
    let naive: f64 = m.per_shard.iter().map(|(_, _, d)| d["c_total"]).sum();
    assert_eq!(naive, 51.0);
    assert_eq!(m.missing, vec![f("d")]);
    assert!(m
        .render()
        .contains("no /metrics scrapes in d.manifest.jsonl"));
    assert!(m.reset_counters().is_empty());
}

#[test]
fn a_counter_that_went_down_is_flagged() {
    let m = merge(&[(
        PathBuf::from("a"),
        vec![pair("0/1", "http://s", (0, 50.0), (10, 3.0))],
    )]);
    assert_eq!(m.reset_counters(), vec!["c_total".to_string()]);
    assert!(m.render().contains("went down"));
}

#[test]
fn stored_scrapes_round_trip_through_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    assert!(read_stored(&out).unwrap().is_empty());
    std::fs::write(manifest_path(&out), "{\"kind\":\"load\",\"seed\":1}\n").unwrap();
    let p = pair("0/1", "http://s", (1, 2.0), (3, 4.0));
    store(&out, &p).unwrap();
    assert_eq!(read_stored(&out).unwrap(), vec![p]);
}
