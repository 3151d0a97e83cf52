//! The Bottlerocket API client against the fake API on a Unix socket.

mod common;

use std::time::{Duration, Instant};

use accelready::bottlerocket::api::{ApiClient, ApiError, ApiTimings};
use common::api::{FakeApi, Fault};
use serde_json::json;

fn fast() -> ApiTimings {
    ApiTimings {
        request_timeout: Duration::from_millis(500),
        attempts: 3,
        backoff: Duration::from_millis(10),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn reads_patches_and_commits_in_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start(
        &dir.path().join("api.sock"),
        json!({"kubernetes": {"node-labels": {"team": "ml"}, "node-taints": {"dedicated": ["gpu:NoSchedule"]}}}),
        Fault::None,
    );
    let client = ApiClient::new(api.socket(), fast());
    runtime().block_on(async {
        let current = client.node_settings().await.unwrap();
        assert_eq!(current.labels["team"], "ml");
        assert_eq!(current.taints["dedicated"], ["gpu:NoSchedule"]);
        client
            .apply(
                "accelready",
                &json!({"kubernetes": {"node-labels": {"accelready.io/dcgm": "missing"}}}),
            )
            .await
            .unwrap();
    });
    let requests = api.requests();
    let lines: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert_eq!(
        lines,
        [
            "GET /settings",
            "PATCH /settings?tx=accelready",
            "POST /tx/commit_and_apply?tx=accelready"
        ]
    );
    let settings = api.settings();
    assert_eq!(
        settings["kubernetes"]["node-labels"]["team"], "ml",
        "other keys kept"
    );
    assert_eq!(
        settings["kubernetes"]["node-labels"]["accelready.io/dcgm"],
        "missing"
    );
}

#[test]
fn retries_server_errors_then_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start(&dir.path().join("api.sock"), json!({}), Fault::FailFirst(2));
    let client = ApiClient::new(api.socket(), fast());
    let settings = runtime().block_on(client.node_settings()).unwrap();
    assert!(settings.labels.is_empty());
    assert_eq!(api.requests().len(), 3);
}

#[test]
fn gives_up_after_the_attempts_with_the_status_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start(
        &dir.path().join("api.sock"),
        json!({}),
        Fault::FailFirst(100),
    );
    let client = ApiClient::new(api.socket(), fast());
    let error = runtime().block_on(client.node_settings()).unwrap_err();
    assert!(matches!(error, ApiError::Status { .. }), "{error:?}");
    assert!(error.to_string().contains("500"), "{error}");
    assert_eq!(api.requests().len(), 3);
}

#[test]
fn a_hung_api_is_bounded_by_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start(&dir.path().join("api.sock"), json!({}), Fault::Hang);
    let client = ApiClient::new(
        api.socket(),
        ApiTimings {
            request_timeout: Duration::from_millis(200),
            attempts: 2,
            backoff: Duration::from_millis(10),
        },
    );
    let started = Instant::now();
    let error = runtime().block_on(client.node_settings()).unwrap_err();
    assert!(matches!(error, ApiError::Timeout { .. }), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_missing_socket_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("absent.sock");
    let client = ApiClient::new(&socket, fast());
    let error = runtime().block_on(client.node_settings()).unwrap_err();
    assert!(matches!(error, ApiError::Connect { .. }), "{error:?}");
    assert!(error.to_string().contains("absent.sock"), "{error}");
}
