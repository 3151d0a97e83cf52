//! `diagnose`'s kubectl JSON (a Node, List or NodeList, and event lists):
//! parsed and forecast at a fixed clock for every modelled Karpenter version,
//! with node repair on and off, never panicking.
#![no_main]

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
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let events = kube::parse_events(text, "fuzz").unwrap_or_default();
    let Ok(input) = kube::parse_nodes(text, "fuzz") else {
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
