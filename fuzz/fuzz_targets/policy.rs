//! Policy documents (the bootstrap container's user-data, `render`'s input):
//! any input is either rejected, or renders user-data TOML that parses back
//! into `UserData` and whose embedded base64 policy parses back to an equal
//! policy; the agent's Helm values and the warnings for its `[agent]` release
//! are decided without a panic.
#![no_main]

use accelready::bottlerocket::userdata::UserData;
use accelready::policy::Policy;
use accelready::render;
use accelready::render::Format as RenderFormat;
use base64::Engine;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(policy) = Policy::parse(text) else {
        return;
    };
    let rendered = render::user_data_toml(&policy);
    let user_data: UserData = toml::from_str(&rendered)
        .unwrap_or_else(|e| panic!("rendered user-data does not parse back: {e}\n{rendered}"));
    assert_eq!(user_data, render::user_data(&policy), "{rendered}");
    let container = user_data
        .settings
        .bootstrap_containers
        .get(&policy.bootstrap.name)
        .expect("the bootstrap container is rendered under the policy's name");
    let embedded = base64::engine::general_purpose::STANDARD
        .decode(&container.user_data)
        .expect("embedded policy is standard base64");
    let embedded = String::from_utf8(embedded).expect("embedded policy is UTF-8");
    let back = Policy::parse(&embedded)
        .unwrap_or_else(|e| panic!("embedded policy does not parse back: {e}\n{embedded}"));
    assert_eq!(back, policy, "{embedded}");
    // The size-limited outputs must decide without panicking.
    let _ = render::render(&policy, RenderFormat::Userdata, None, false);
    let _ = render::render(&policy, RenderFormat::Userdata, None, true);
    if let Ok(values) = render::render(&policy, RenderFormat::AgentValues, None, false) {
        assert!(
            values.ends_with('\n') && values.starts_with("# "),
            "{values}"
        );
    }
    let _ = render::explain(&policy, &render::warnings(&policy, None));
});
