//! The differential check against real SGLang, with no server running: the battery SGLang 0.5.23
//! answered (recorded by `conformance diff --real URL --save fixtures/diff/sglang-0.5.23`) is sent
//! to a fresh mock set up as the recording says, and every difference must be one the committed
//! known-differences list names.

use conformance::diff::{against_recording, parse_known, render, KNOWN_DIFFERENCES};
use std::path::PathBuf;

fn recording() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/diff/sglang-0.5.23")
}

#[tokio::test]
async fn the_mock_answers_the_recorded_sglang_battery_as_sglang_did() {
    let known = parse_known(KNOWN_DIFFERENCES).expect("the committed list parses");
    let r = against_recording(&recording(), &known)
        .await
        .expect("the recording loads and the mock starts");
    let text = render(&r, true);
    assert!(r.cases >= 30, "{} cases\n{text}", r.cases);
    // No behaviour difference at all, known or not: status, content type, stream end, in-band error.
    let behaviour: Vec<_> = r.behaviour().collect();
    assert!(behaviour.is_empty(), "behaviour differences:\n{text}");
    assert!(
        r.passed(),
        "differences the known list does not name:\n{text}"
    );
    assert!(
        r.stale.is_empty(),
        "stale entries in the known list:\n{text}"
    );
    assert!(
        r.coverage_percent() >= 90.0,
        "the mock carries {:.1}% of SGLang's per-request key paths\n{text}",
        r.coverage_percent()
    );
}
