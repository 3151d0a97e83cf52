//! `diagnose`'s kubectl JSON (a Node, List or NodeList, and event lists):
//! parsed as a stream and from memory — the two must agree, result and
//! error alike — and from a stream cut short by a size limit; then forecast
//! at a fixed clock for every modelled Karpenter version, with node repair
//! on and off, never panicking.
#![no_main]

use accelready::input::{Bounded, Limit};
use accelready::repair::kube;
use accelready::repair::model::{model_for, Version};
use accelready::repair::{forecast, Options, Verdict};
use libfuzzer_sys::fuzz_target;
use time::macros::datetime;

const VERSIONS: [Version; 4] = [
    Version::new(1, 2, 0),
    Version::new(1, 4, 0),
    Version::new(1, 6, 0),
    Version::new(1, 7, 0),
];

fuzz_target!(|data: &[u8]| {
    // Any bytes, as a stream (what `diagnose` reads), also cut at half.
    let streamed = kube::read_nodes(data, "fuzz");
    let streamed_events = kube::read_events(data, "fuzz");
    let half = Limit::new(data.len() as u64 / 2 + 1, "for the fuzzer");
    let _ = kube::read_nodes(Bounded::new(data, half), "fuzz");
    let _ = kube::read_events(Bounded::new(data, half), "fuzz");

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let events = kube::parse_events(text, "fuzz");
    let parsed = kube::parse_nodes(text, "fuzz");
    match (&parsed, &streamed) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("memory and stream disagree: {parsed:?} / {streamed:?}"),
    }
    match (&events, &streamed_events) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("memory and stream disagree: {events:?} / {streamed_events:?}"),
    }
    let events = events.unwrap_or_default();
    let Ok(input) = parsed else {
        return;
    };
    for version in VERSIONS {
        let model = model_for(version).expect("modelled version");
        for node_repair in [true, false] {
            let options = Options {
                karpenter: version,
                node_repair,
                now: datetime!(2025-06-10 03:05:00 UTC),
            };
            let result = forecast(&input, &events, model, options);
            assert_eq!(result.nodes.len(), input.nodes().len());
            let replaced = result
                .nodes
                .iter()
                .filter(|n| n.verdict == Verdict::WillBeReplaced)
                .count();
            assert_eq!(result.will_be_replaced, replaced);
            if !node_repair {
                assert_eq!(replaced, 0);
            }
            serde_json::to_string(&result).expect("a forecast always serializes");
        }
    }
});
