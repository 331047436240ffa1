//! The configuration's presets, files and checks.

use super::*;

#[test]
fn presets_parse_and_validate() {
    for name in Config::preset_names() {
        let c = Config::preset(name).unwrap();
        c.validate().unwrap();
    }
    assert_eq!(Config::default().port, 30000);
}

#[test]
fn set_overrides_and_rejects() {
    let mut c = Config::default();
    c.set("mem_fraction_static", "0.93").unwrap();
    assert_eq!(c.mem_fraction_static, 0.93);
    c.set("chunked_prefill_size", "-1").unwrap();
    assert_eq!(c.chunked_prefill_size, -1);
    c.set("speculative_algorithm", "EAGLE").unwrap();
    assert_eq!(c.speculative_algorithm, "EAGLE");
    c.set("api_key", "secret").unwrap();
    assert_eq!(c.api_key.as_deref(), Some("secret"));
    c.set("time_scale", "2").unwrap();
    assert_eq!(c.time_scale, 2.0);
    assert!(matches!(
        c.set("nope", "1"),
        Err(ConfigError::UnknownKey(_))
    ));
    assert!(c.set("port", "banana").is_err());
    assert!(Config::preset("nope").is_err());
}

#[test]
fn preset_files_are_read_and_refused_with_the_key_named() {
    let dir = std::env::temp_dir().join(format!("mock-preset-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kimi = include_str!("../../../fixtures/presets/kimi-k2.6-dflash-8xrtx-pro-6000.toml");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let ok = Config::preset_file(&write("ok.toml", kimi)).unwrap();
    assert_eq!(
        ok,
        Config::preset("kimi-k2.6-dflash-8xrtx-pro-6000").unwrap()
    );
    let refused = |name: &str, text: String, key: &str| {
        let e = Config::preset_file(&write(name, &text))
            .unwrap_err()
            .to_string();
        assert!(e.contains(key) && e.contains(name), "{e}");
    };
    refused(
        "unknown.toml",
        format!("{kimi}\nprefill_bogus_s = 1.0\n"),
        "prefill_bogus_s",
    );
    refused(
        "negative.toml",
        kimi.replace("decode_base_s = 0.00005", "decode_base_s = -0.00005"),
        "decode_base_s",
    );
    refused(
        "pool.toml",
        kimi.replace("kv_bytes_per_token = 70272", "kv_bytes_per_token = 7027200"),
        "context_length",
    );
    refused(
        "shares.toml",
        format!("{kimi}\nspec_warmup_shares = [0.5, -0.5]\n"),
        "spec_warmup_shares",
    );
    refused(
        "missing.toml",
        kimi.replace("decode_base_s = 0.00005", ""),
        "decode_base_s",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn empty_kv_pool_is_refused() {
    let mut c = Config::preset("kimi-k2.6-dflash-8xrtx-pro-6000").unwrap();
    c.set("mem_fraction_static", "0.5").unwrap();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("Not enough memory"), "{e}");
}

#[test]
fn the_batch_cost_grows_as_its_exponent_says() {
    let mut c = Config::default();
    c.decode_per_request_s = 0.001;
    assert!((c.decode_batch_cost_s(16) - 0.016).abs() < 1e-15);
    c.set("decode_batch_exponent", "0.5").unwrap();
    assert!((c.decode_batch_cost_s(16) - 0.004).abs() < 1e-15);
    assert!(c.validate().is_ok());
    for bad in ["0", "-0.5", "2.5", "nan"] {
        c.set("decode_batch_exponent", bad).unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("decode_batch_exponent"), "{bad}: {e}");
    }
}

#[test]
fn costs_past_any_server_are_refused_and_a_long_event_ends_the_clock() {
    for (key, bad) in [
        ("prefill_per_token_s", "1e7"),
        ("decode_base_s", "1e300"),
        ("stream_latency_s", "7105332872"),
        ("prefill_per_token_pair_s", "1e-3"),
    ] {
        let mut c = Config::default();
        c.set(key, bad).unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains(key) && e.contains("in seconds?"), "{key}: {e}");
    }
    let mut c = Config::default();
    c.set("time_scale", "1e-9").unwrap();
    assert!(c.validate().is_err());
    let c = Config::default();
    assert_eq!(
        c.scaled(1e300),
        std::time::Duration::from_secs(1_000_000_000)
    );
    assert_eq!(c.scaled(f64::NAN), std::time::Duration::ZERO);
}

#[test]
fn a_table_preset_names_where_its_rows_end() {
    assert_eq!(
        Config::preset("small-cpu-demo").unwrap().fitted_rows_note(),
        None
    );
    // The preset's 24 rows: inputs 1,024 to 4,096, outputs 128 to 512, 16 to 128 in flight.
    let note = Config::preset("qwen3-32b-h100-tp2-sglang")
        .unwrap()
        .fitted_rows_note()
        .unwrap();
    assert!(
        note.starts_with(
            "this preset's 24 fitted rows (up to 128 in flight, 4096 tokens in, 512 out)"
        ),
        "{note}"
    );
    assert!(
        note.contains("past those rows the model extrapolates"),
        "{note}"
    );
}

#[test]
fn compact_numbers_are_short_at_any_magnitude() {
    for (v, want) in [
        (0.0, "0"),
        (0.5, "0.5"),
        (2592000.0, "2592000"),
        (-12.25, "-12.25"),
        (1e300, "1e300"),
        (-1e300, "-1e300"),
        (1e-7, "1e-7"),
        (1.5e9, "1.5e9"),
        (f64::INFINITY, "inf"),
    ] {
        assert_eq!(compact(v), want, "{v}");
    }
    // A parameter's check shows a huge value the same way.
    let mut c = Config::default();
    c.set("prefill_per_token_s", "1e300").unwrap();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("prefill_per_token_s = 1e300 s is past"), "{e}");
    assert!(e.len() < 200, "{e}");
}
