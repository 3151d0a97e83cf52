//! The Bottlerocket API client's `GET /settings` answer handling: node labels
//! and taints or an error, never a panic.
#![no_main]

use accelready::bottlerocket::api::parse_node_settings;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_node_settings(data);
});
