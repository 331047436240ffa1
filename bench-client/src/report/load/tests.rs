use super::*;

#[test]
fn slo_parses() {
    assert_eq!(
        Slo::parse("ttft=500,tpot=50").unwrap(),
        Slo {
            ttft_ms: Some(500.0),
            tpot_ms: Some(50.0)
        }
    );
    for bad in ["", "ttft", "ttft=-1", "ttft=abc", "itl=3", "tpot=inf"] {
        assert!(Slo::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn overlapping_pieces_count_once_and_gaps_not_at_all() {
    assert_eq!(union_ns(Vec::new()), 0);
    assert_eq!(union_ns(vec![(10, 20), (15, 30)]), 20);
    assert_eq!(union_ns(vec![(100, 130), (10, 20), (12, 18)]), 40);
}
