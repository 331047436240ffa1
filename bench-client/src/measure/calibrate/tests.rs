//! The fits on requests made exactly by the mock's formulas: they give the parameters back, and
//! they refuse data that cannot determine them.

use super::*;
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
struct Costs {
    way: f64,
    pb: f64,
    pt: f64,
    pp: f64,
    db: f64,
    dc: f64,
    dr: f64,
}

/// A request alone, timed as the mock times it: TTFT from its prefill passes, then one verify step
/// of `step_tokens` per chunk (the last clipped to `out` tokens).
fn alone(c: &Costs, prompt: u32, chunk: usize, out: u32, step_tokens: u32) -> Observed {
    let (k, n, q) = prefill_terms(prompt, 0, chunk);
    let mut t = c.way + k * c.pb + n * c.pt + q * c.pp;
    let first = step_tokens.min(out);
    let mut chunks = vec![(t, first)];
    let (mut done, mut ctx) = (first, f64::from(prompt));
    while done < out {
        let tok = step_tokens.min(out - done);
        t += c.db + c.dr + c.dc * ctx;
        ctx += f64::from(tok);
        done += tok;
        chunks.push((t, tok));
    }
    Observed {
        context: prompt,
        prompt_tokens: prompt,
        cached_tokens: 0,
        sent_s: 0.0,
        chunks,
        counts_known: true,
        way_s: None,
    }
}

fn costs() -> impl Strategy<Value = Costs> {
    (
        0.0f64..0.005,
        (0.005f64..0.05, 1e-5f64..1e-4, 1e-10f64..1e-8),
        (0.001f64..0.02, 1e-7f64..1e-5, 1e-4f64..1e-3),
    )
        .prop_map(|(way, (pb, pt, pp), (db, dc, dr))| Costs {
            way,
            pb,
            pt,
            pp,
            db,
            dc,
            dr,
        })
}

fn near(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-6 * want.abs() + 1e-12
}

proptest! {
    #[test]
    fn exact_requests_give_the_parameters_back(c in costs(), chunk in prop_oneof![Just(512usize), Just(1024)], l in 1u32..4) {
        let facts = ServerFacts {
            chunked_prefill_size: Some(chunk as i64),
            speculative: Some(l > 1),
            ..ServerFacts::default()
        };
        let sweep: Vec<Observed> = [300u32, 900, 1700, 2600, 4000]
            .iter()
            .map(|&p| alone(&c, p, chunk, 40, l))
            .collect();
        let p = fit_prefill(&sweep, &facts, None, &[]).unwrap();
        prop_assert!(near(p.way_s, c.way) && near(p.base_s, c.pb), "{p:?} {c:?}");
        prop_assert!(near(p.per_token_s, c.pt) && near(p.per_token_pair_s, c.pp), "{p:?} {c:?}");
        prop_assert!(p.r_squared > 1.0 - 1e-9);
        // Alone, the batch cost cannot be told from the base: the base preset's stands in.
        let d = decode::fit_decode(&sweep, &[], l > 1, false, c.dr).unwrap();
        prop_assert!(!d.per_request_fitted);
        prop_assert!(near(d.base_s, c.db) && near(d.per_context_token_s, c.dc), "{d:?} {c:?}");
    }
}

#[test]
fn acceptance_rates_are_the_conditional_shares_of_verify_steps() {
    // Verify steps of 2, 2, 1, 3 tokens (the last chunk, clipped, is left out): position 1 was
    // accepted in 3 of 4 steps, position 2 in 1 of the 3 that reached it.
    let r = Observed {
        context: 10,
        prompt_tokens: 10,
        cached_tokens: 0,
        sent_s: 0.0,
        chunks: vec![(0.1, 2), (0.2, 2), (0.3, 1), (0.4, 3), (0.5, 1)],
        counts_known: true,
        way_s: None,
    };
    let facts = ServerFacts {
        speculative: Some(true),
        draft_tokens: Some(3),
        ..ServerFacts::default()
    };
    match fit_shape(&[r], &facts) {
        Shape::Speculative {
            accept_rates,
            steps,
            warmup_steps,
            ..
        } => {
            assert_eq!(steps, 4);
            assert_eq!(accept_rates, vec![0.75, 1.0 / 3.0, 0.0]);
            assert_eq!(warmup_steps, 0);
        }
        s => panic!("{s:?}"),
    }
}

#[test]
fn one_token_steps_after_the_first_chunk_are_a_warm_up_left_out_of_the_rates() {
    // Prompt-lookup drafts: each request's first steps after its first chunk carry one token
    // (two, three and two of them), then the drafts are accepted. The median run, 2, is the
    // warm-up; each request's own run is its draw (shares 2/3 at two steps, 1/3 at three), and
    // the rates come from the steps after it. Every first chunk is one token where the later
    // steps always accept a draft: the prefill's token, left out.
    let req = |ones: usize| Observed {
        context: 10,
        prompt_tokens: 10,
        cached_tokens: 0,
        sent_s: 0.0,
        chunks: std::iter::once((0.1, 1))
            .chain((0..ones).map(|i| (0.2 + 0.1 * i as f64, 1)))
            .chain([(1.0, 3), (1.1, 3), (1.2, 2), (1.3, 1)])
            .collect(),
        counts_known: true,
        way_s: None,
    };
    let facts = ServerFacts {
        speculative: Some(true),
        draft_tokens: Some(2),
        ..ServerFacts::default()
    };
    // A request of one chunk (one output token) has no run and no later step.
    let one = Observed {
        chunks: vec![(0.1, 1)],
        ..req(0)
    };
    match fit_shape(&[req(2), req(3), req(2), one], &facts) {
        Shape::Speculative {
            accept_rates,
            steps,
            warmup_steps,
            warmup_shares,
            first_token_alone,
            ..
        } => {
            assert_eq!(warmup_steps, 2);
            assert_eq!(warmup_shares, vec![0.0, 0.0, 2.0 / 3.0, 1.0 / 3.0]);
            assert!(first_token_alone);
            // Three steps per request after its own run: 3, 3, 2 tokens.
            assert_eq!(steps, 9);
            assert_eq!(accept_rates[0], 1.0);
            assert_eq!(accept_rates[1], 6.0 / 9.0);
        }
        s => panic!("{s:?}"),
    }
}

#[test]
fn a_one_token_first_chunk_is_the_prefill_s_only_when_a_verify_step_would_rarely_be_one() {
    // Requests whose first chunks carry `firsts` tokens and whose later steps carry `later`.
    let reqs = |firsts: &[u32], later: &[u32]| -> Vec<Observed> {
        firsts
            .iter()
            .map(|&f| Observed {
                context: 10,
                prompt_tokens: 10,
                cached_tokens: 0,
                sent_s: 0.0,
                chunks: std::iter::once((0.1, f))
                    .chain(
                        later
                            .iter()
                            .enumerate()
                            .map(|(i, &t)| (0.2 + 0.1 * i as f64, t)),
                    )
                    .chain([(9.0, 1)])
                    .collect(),
                counts_known: true,
                way_s: None,
            })
            .collect()
    };
    let facts = ServerFacts {
        speculative: Some(true),
        draft_tokens: Some(2),
        ..ServerFacts::default()
    };
    let alone = |rs: &[Observed]| match fit_shape(rs, &facts) {
        Shape::Speculative {
            first_token_alone,
            steps,
            ..
        } => (first_token_alone, steps),
        s => panic!("{s:?}"),
    };
    // Later steps accept a draft 4 times in 5: five one-token first chunks happen 0.2^5 = 0.03%
    // of the time by chance, so they are the prefill's (left out: 5 x 5 steps).
    assert_eq!(alone(&reqs(&[1; 5], &[3, 2, 3, 3, 1])), (true, 25));
    // One first chunk of two tokens: verify steps, counted.
    assert_eq!(
        alone(&reqs(&[1, 1, 2, 1, 1], &[3, 2, 3, 3, 1])),
        (false, 30)
    );
    // Drafts accepted half the time: two one-token first chunks are a quarter's chance.
    assert_eq!(alone(&reqs(&[1, 1], &[2, 1, 2, 1])), (false, 10));
}

#[test]
fn two_contexts_are_refused_with_what_is_missing() {
    let c = Costs {
        way: 0.0,
        pb: 0.01,
        pt: 1e-4,
        pp: 0.0,
        db: 0.01,
        dc: 1e-6,
        dr: 1e-3,
    };
    let sweep: Vec<Observed> = [500u32, 1000]
        .iter()
        .map(|&p| alone(&c, p, 512, 8, 1))
        .collect();
    let e = fit_prefill(&sweep, &ServerFacts::default(), None, &[]).unwrap_err();
    assert!(
        e.missing.contains("three or more context lengths (have 2)"),
        "{e:?}"
    );
}

#[test]
fn without_chunking_the_way_in_and_out_is_counted_as_prefill() {
    let c = Costs {
        way: 0.002,
        pb: 0.01,
        pt: 1e-4,
        pp: 1e-9,
        db: 0.01,
        dc: 1e-6,
        dr: 1e-3,
    };
    let sweep: Vec<Observed> = [500u32, 1000, 3000]
        .iter()
        .map(|&p| alone(&c, p, usize::MAX, 8, 1))
        .collect();
    let p = fit_prefill(&sweep, &ServerFacts::default(), None, &[]).unwrap();
    assert!(near(p.base_s, c.pb + c.way) && p.way_s == 0.0, "{p:?}");
    assert!(
        p.notes.iter().any(|n| n.contains("way in and out")),
        "{:?}",
        p.notes
    );
}

#[test]
fn bandwidth_share_is_bytes_per_second_over_the_bandwidth() {
    let s = bandwidth_share(2.55e-5, 70272.0, 1792.0).unwrap();
    assert!(near(s, 70272.0 / 2.55e-5 / 1.792e12), "{s}");
    assert!(bandwidth_share(0.0, 70272.0, 1792.0).is_none());
}

/// A decode fit of 8 ms steps + 1 ms per request + 1 us per context token.
fn small_steps() -> decode::DecodeFit {
    decode::DecodeFit {
        base_s: 0.008,
        per_context_token_s: 1e-6,
        per_request_s: 0.001,
        points: Vec::new(),
        r_squared: 1.0,
        notes: Vec::new(),
        per_request_fitted: true,
        max_batch: 2,
    }
}

/// A request of a load run: sent at `sent`, its chunks at the instants `at` (one token each).
fn timed(prompt: u32, sent: f64, at: &[f64]) -> Observed {
    Observed {
        context: prompt,
        prompt_tokens: prompt,
        cached_tokens: 0,
        sent_s: sent,
        chunks: at.iter().map(|&t| (t - sent, 1)).collect(),
        counts_known: true,
        way_s: None,
    }
}

#[test]
fn a_load_run_s_prefill_stretches_are_the_passes_between_decode_steps() {
    let decode = small_steps();
    // A, prefilled from an idle server (its first pass, left out), decodes in 10 ms steps. B,
    // sent during A's step ending at 0.13, is prefilled in a 50 ms mixed pass beside A's step,
    // then both decode. C is sent once both ended, to an idle server: left out.
    let a = timed(100, 0.0, &[0.10, 0.11, 0.12, 0.13, 0.18, 0.19, 0.20]);
    let b = timed(300, 0.125, &[0.18, 0.19, 0.20, 0.21]);
    let c = timed(200, 0.30, &[0.40, 0.41, 0.42]);
    let got = passes::stretches(&[a, b, c], &decode, 512);
    assert_eq!(got.len(), 1, "{got:?}");
    let s = got[0];
    assert_eq!((s.passes, s.tokens, s.pairs), (1.0, 300.0, 300.0 * 150.0));
    // A's step beside the prefill: one request at its context before the step (100 + 3 tokens).
    assert!(near(s.batch_s, 0.001 + 1e-6 * 103.0), "{s:?}");
    assert!(near(s.time_s, 0.05), "{s:?}");
}

/// Requests alone at 256, 1,024 and 3,000 tokens on `c`, in passes of 512 (SGLang's chunk on CPU).
fn three_contexts(c: &Costs) -> (ServerFacts, Vec<Observed>) {
    let facts = ServerFacts {
        chunked_prefill_size: Some(512),
        ..ServerFacts::default()
    };
    let sweep = [256u32, 1024, 3000]
        .iter()
        .map(|&p| alone(c, p, 512, 8, 1))
        .collect();
    (facts, sweep)
}

/// One request a context whose TTFT is the given median (s), each with `way_s`.
fn medians(points: &[(u32, f64)], way_s: Option<f64>) -> Vec<Observed> {
    points
        .iter()
        .map(|&(p, t)| Observed {
            context: p,
            prompt_tokens: p,
            cached_tokens: 0,
            sent_s: 0.0,
            chunks: vec![(t, 1), (t + 0.01, 1)],
            counts_known: true,
            way_s,
        })
        .collect()
}

/// Three contexts cannot tell the way in and out from a pass's base cost. Counted in the base, the
/// passes of a long prompt would pay it again and again, and SGLang's CPU sweep (a large way in
/// and out, next to nothing per token) then needs a negative cost per token: the fit keeps every
/// cost non-negative and fits the three exactly with the least way in and out that allows.
#[test]
fn a_three_context_fit_that_would_need_a_negative_cost_takes_the_least_way_in_and_out() {
    let c = Costs {
        way: 0.0129,
        pb: 0.0068,
        pt: 0.0,
        pp: 7.3e-8,
        db: 0.004,
        dc: 8e-7,
        dr: 9e-4,
    };
    let (facts, sweep) = three_contexts(&c);
    let p = fit_prefill(&sweep, &facts, None, &[]).unwrap();
    assert!(near(p.way_s, c.way) && near(p.base_s, c.pb), "{p:?}");
    assert!(
        p.per_token_s == 0.0 && near(p.per_token_pair_s, c.pp),
        "{p:?}"
    );
    assert!(p.points.iter().all(|x| x.rel_error().abs() < 1e-9), "{p:?}");
    assert!(
        p.notes.iter().any(|n| n.contains("the least that fits")),
        "{:?}",
        p.notes
    );
    // Noisy medians (2%) of a large way in and out: the fit that fits the way leaves no cost
    // negative once its own negative costs are refitted at 0, and misses none by 1%.
    let noisy = medians(&[(256, 0.046364), (1024, 0.058408), (3000, 0.162646)], None);
    let p = fit_prefill(&noisy, &facts, None, &[]).unwrap();
    assert!(p.points.iter().all(|x| x.rel_error().abs() < 0.01), "{p:?}");
    // Where counting it in the base needs no negative cost, that is still the fit.
    let small = Costs {
        way: 0.0,
        pt: 8e-5,
        ..c
    };
    let (_, sweep) = three_contexts(&small);
    let p = fit_prefill(&sweep, &facts, None, &[]).unwrap();
    assert!(p.way_s == 0.0 && near(p.base_s, small.pb), "{p:?}");
}

#[test]
fn load_stretches_join_the_prefill_fit_and_a_misread_one_is_left_out() {
    let c = Costs {
        way: 0.004,
        pb: 0.01,
        pt: 8e-5,
        pp: 2e-8,
        db: 0.01,
        dc: 1e-6,
        dr: 1e-3,
    };
    let facts = ServerFacts {
        chunked_prefill_size: Some(2048),
        ..ServerFacts::default()
    };
    // Three contexts: alone they cannot tell the way in and out from a pass's base cost.
    let sweep: Vec<Observed> = [300u32, 1700, 4000]
        .iter()
        .map(|&p| alone(&c, p, 2048, 8, 1))
        .collect();
    let merged = fit_prefill(&sweep, &facts, None, &[]).unwrap();
    assert_eq!(merged.way_s, 0.0);
    // Stretches timed as the mock times them: no way in and out, a running batch beside.
    let exact = |passes: f64, prompts: &[f64], batch_s: f64| {
        let tokens: f64 = prompts.iter().sum();
        let pairs: f64 = prompts.iter().map(|p| p * p / 2.0).sum();
        passes::Stretch {
            passes,
            tokens,
            pairs,
            batch_s,
            time_s: passes * c.pb + tokens * c.pt + pairs * c.pp + batch_s,
        }
    };
    let misread = passes::Stretch {
        time_s: 0.005,
        ..exact(1.0, &[1024.0], 0.002)
    };
    let empty = passes::Stretch {
        time_s: 0.02,
        ..exact(1.0, &[], 0.001)
    };
    let run = vec![
        exact(1.0, &[1024.0], 0.004),
        exact(2.0, &[1024.0, 1024.0], 0.008),
        misread,
        exact(1.0, &[512.0], 0.002),
        empty,
        exact(3.0, &[2048.0, 1024.0], 0.01),
    ];
    let p = fit_prefill(&sweep, &facts, None, &[run]).unwrap();
    assert!(near(p.way_s, c.way) && near(p.base_s, c.pb), "{p:?}");
    assert!(
        near(p.per_token_s, c.pt) && near(p.per_token_pair_s, c.pp),
        "{p:?}"
    );
    assert!(
        p.notes.iter().any(|n| n.contains("by 4 stretches")),
        "{:?}",
        p.notes
    );
    let load = p.points.last().unwrap();
    assert_eq!(
        (load.label.as_str(), load.n),
        ("load run 1 prefill passes", 4)
    );
    assert!(near(load.predicted, load.measured), "{load:?}");
}

#[test]
fn a_prefill_pass_that_sent_nothing_still_counts_in_its_stretch() {
    let decode = small_steps();
    // A scheduler that stalls decoding for prefill: B's 1,000 tokens take two 512-token passes
    // (0.13 to 0.23), the first of which sends nothing; A decodes before and after.
    let a = timed(100, 0.0, &[0.10, 0.11, 0.12, 0.13, 0.24, 0.25]);
    let b = timed(1000, 0.125, &[0.23, 0.24, 0.25, 0.26]);
    let got = passes::stretches(&[a, b], &decode, 512);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].passes, got[0].tokens), (2.0, 1000.0), "{got:?}");
    assert!(
        near(got[0].time_s, 0.10) && got[0].batch_s == 0.0,
        "{got:?}"
    );
}

/// Where the server times its own part of TTFT (SGLang's `first_token_latency`), the rest is the
/// way in and out: three contexts then give the three prefill costs exactly, where the least-way
/// rule, which the same TTFTs alone leave, puts part of a pass's base cost into the way (a way
/// that stalls no other request, so the twin under load comes out low).
#[test]
fn the_server_s_own_timing_tells_the_way_in_and_out_from_a_pass_s_base_cost() {
    let c = Costs {
        way: 0.005,
        pb: 0.0096,
        pt: 2e-5,
        pp: 4.7e-8,
        db: 0.004,
        dc: 8e-7,
        dr: 9e-4,
    };
    let (facts, sweep) = three_contexts(&c);
    // The TTFTs alone: the least way that fits them is not the server's.
    let p = fit_prefill(&sweep, &facts, None, &[]).unwrap();
    assert!(!near(p.way_s, c.way), "{p:?}");
    let timed: Vec<Observed> = sweep
        .iter()
        .map(|r| Observed {
            way_s: Some(c.way),
            ..r.clone()
        })
        .collect();
    let p = fit_prefill(&timed, &facts, None, &[]).unwrap();
    assert!(near(p.way_s, c.way) && near(p.base_s, c.pb), "{p:?}");
    assert!(
        near(p.per_token_s, c.pt) && near(p.per_token_pair_s, c.pp),
        "{p:?}"
    );
    assert!(p.points.iter().all(|x| x.rel_error().abs() < 1e-9), "{p:?}");
    assert!(
        p.notes.iter().any(|n| n.contains("the server's own")),
        "{:?}",
        p.notes
    );
    // Medians the model cannot fit exactly (SGLang on CPU, 2 cores): the costs minimise the
    // relative error, so the short context, a tenth of the long one's TTFT, misses by no more.
    let real = medians(
        &[(256, 0.018490), (1024, 0.052033), (3000, 0.317573)],
        Some(0.004256),
    );
    let r = fit_prefill(&real, &facts, None, &[]).unwrap();
    assert!(near(r.way_s, 0.004256), "{r:?}");
    assert!(r.points.iter().all(|x| x.rel_error().abs() < 0.06), "{r:?}");
    // Fewer than half the requests timed: the TTFTs alone decide.
    let mut few = sweep.clone();
    for r in few.iter_mut().take(1) {
        r.way_s = Some(c.way);
    }
    let q = fit_prefill(&few, &facts, None, &[]).unwrap();
    assert_eq!(
        q.way_s,
        fit_prefill(&sweep, &facts, None, &[]).unwrap().way_s
    );
}
