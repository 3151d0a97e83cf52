//! A small client for the Bottlerocket API: HTTP/1.1 over the API Unix socket
//! (`/run/api.sock` inside a bootstrap container), with a deadline on every call.
//!
//! Only what `boot` needs: read settings, patch settings in a named
//! transaction, commit and apply it (FACTS §3: `PATCH /settings?tx=<name>`,
//! then `POST /tx/commit_and_apply?tx=<name>`; `GET /settings` reads).
//! Response parsing is pure ([`parse_node_settings`]) so it can be fuzzed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::UnixStream;
use tracing::{debug, warn};

/// The API socket as a bootstrap container sees it.
pub const DEFAULT_SOCKET: &str = "/run/api.sock";

/// We never need more than this from the API; a bigger answer is an error.
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// Errors talking to the Bottlerocket API. Each names the socket and request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot connect to the Bottlerocket API at '{socket}'")]
    Connect {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{method} {path} on '{socket}' failed")]
    Http {
        socket: PathBuf,
        method: Method,
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{method} {path} on '{socket}' timed out after {timeout:?}")]
    Timeout {
        socket: PathBuf,
        method: Method,
        path: String,
        timeout: Duration,
    },
    #[error("{method} {path} on '{socket}' answered {status}: {body}")]
    Status {
        socket: PathBuf,
        method: Method,
        path: String,
        status: StatusCode,
        body: String,
    },
    #[error("the Bottlerocket API's answer to GET {path} is not what we expected: {reason}")]
    Response { path: String, reason: String },
}

impl ApiError {
    /// Whether trying again may help: connection trouble, timeouts, 5xx.
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Connect { .. } | ApiError::Http { .. } | ApiError::Timeout { .. } => true,
            ApiError::Status { status, .. } => status.is_server_error(),
            ApiError::Response { .. } => false,
        }
    }
}

/// How hard to try: per-request timeout, and a short bounded retry.
#[derive(Debug, Clone)]
pub struct ApiTimings {
    pub request_timeout: Duration,
    pub attempts: u32,
    pub backoff: Duration,
}

impl Default for ApiTimings {
    fn default() -> Self {
        ApiTimings {
            request_timeout: Duration::from_secs(5),
            attempts: 3,
            backoff: Duration::from_millis(250),
        }
    }
}

/// A client for one API socket.
#[derive(Debug, Clone)]
pub struct ApiClient {
    socket: PathBuf,
    timings: ApiTimings,
}

/// The node settings `boot` merges into: labels and taints as Bottlerocket
/// stores them (`kubernetes.node-labels`, `kubernetes.node-taints`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSettings {
    pub labels: BTreeMap<String, String>,
    /// Taint key -> list of `"value:Effect"` entries.
    pub taints: BTreeMap<String, Vec<String>>,
}

impl ApiClient {
    pub fn new(socket: impl Into<PathBuf>, timings: ApiTimings) -> Self {
        ApiClient {
            socket: socket.into(),
            timings,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Reads the current node labels and taints (`GET /settings`).
    pub async fn node_settings(&self) -> Result<NodeSettings, ApiError> {
        let path = "/settings";
        let body = self.call(Method::GET, path, None).await?;
        parse_node_settings(&body).map_err(|reason| ApiError::Response {
            path: path.to_owned(),
            reason,
        })
    }

    /// Writes `settings` (a JSON subtree without the `settings.` prefix) into
    /// transaction `tx`, then commits and applies it.
    pub async fn apply(&self, tx: &str, settings: &Value) -> Result<(), ApiError> {
        let body = serde_json::to_vec(settings).expect("a serde_json::Value always serializes");
        self.call(Method::PATCH, &format!("/settings?tx={tx}"), Some(body))
            .await?;
        self.call(Method::POST, &format!("/tx/commit_and_apply?tx={tx}"), None)
            .await?;
        Ok(())
    }

    /// One request with the per-request timeout, retried while transient.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Bytes, ApiError> {
        let mut attempt = 1;
        loop {
            let result = match tokio::time::timeout(
                self.timings.request_timeout,
                self.request_once(method.clone(), path, body.clone()),
            )
            .await
            {
                Ok(result) => result,
                Err(_) => Err(ApiError::Timeout {
                    socket: self.socket.clone(),
                    method: method.clone(),
                    path: path.to_owned(),
                    timeout: self.timings.request_timeout,
                }),
            };
            match result {
                Ok(bytes) => return Ok(bytes),
                Err(e) if e.is_transient() && attempt < self.timings.attempts => {
                    warn!(error = %e, attempt, "Bottlerocket API call failed; retrying");
                    tokio::time::sleep(self.timings.backoff * attempt).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn request_once(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Bytes, ApiError> {
        let http_error = |source: Box<dyn std::error::Error + Send + Sync>| ApiError::Http {
            socket: self.socket.clone(),
            method: method.clone(),
            path: path.to_owned(),
            source,
        };
        let stream =
            UnixStream::connect(&self.socket)
                .await
                .map_err(|source| ApiError::Connect {
                    socket: self.socket.clone(),
                    source,
                })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| http_error(e.into()))?;
        let connection = tokio::spawn(connection);

        let mut request = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(hyper::header::HOST, "localhost");
        if body.is_some() {
            request = request.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| http_error(e.into()))?;
        debug!(%method, path, socket = %self.socket.display(), "Bottlerocket API request");
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| http_error(e.into()))?;
        let status = response.status();
        let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(http_error)?
            .to_bytes();
        connection.abort();
        if !status.is_success() {
            return Err(ApiError::Status {
                socket: self.socket.clone(),
                method,
                path: path.to_owned(),
                status,
                body: String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned(),
            });
        }
        Ok(bytes)
    }
}

/// Extracts node labels and taints from a `GET /settings` answer.
///
/// The API answers with the settings tree without the `settings.` prefix
/// (`{"kubernetes": {"node-labels": {...}}}`); a tree wrapped in a top-level
/// `settings` object is accepted too. Missing sections are empty; a section of
/// the wrong shape is an error, since merging into it could lose keys.
pub fn parse_node_settings(body: &[u8]) -> Result<NodeSettings, String> {
    let root: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let root = match root.get("settings") {
        Some(inner) if inner.is_object() => inner,
        _ => &root,
    };
    if !root.is_object() {
        return Err("the settings tree is not a JSON object".into());
    }
    let kubernetes = match root.get("kubernetes") {
        None | Some(Value::Null) => return Ok(NodeSettings::default()),
        Some(k) if k.is_object() => k,
        Some(_) => return Err("'kubernetes' is not an object".into()),
    };
    let mut settings = NodeSettings::default();
    match kubernetes.get("node-labels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let value = value
                    .as_str()
                    .ok_or_else(|| format!("label '{key}' has a non-string value"))?;
                settings.labels.insert(key.clone(), value.to_owned());
            }
        }
        Some(_) => return Err("'kubernetes.node-labels' is not an object".into()),
    }
    match kubernetes.get("node-taints") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let entries = match value {
                    // Older settings models stored one "value:Effect" string.
                    Value::String(one) => vec![one.clone()],
                    Value::Array(list) => list
                        .iter()
                        .map(|v| v.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| format!("taint '{key}' has a non-string entry"))?,
                    _ => return Err(format!("taint '{key}' is neither a string nor a list")),
                };
                settings.taints.insert(key.clone(), entries);
            }
        }
        Some(_) => return Err("'kubernetes.node-taints' is not an object".into()),
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_labels_and_taints() {
        let body = br#"{"motd":"hi","kubernetes":{"cluster-name":"c",
            "node-labels":{"team":"ml","accelready.io/dcgm":"missing"},
            "node-taints":{"dedicated":["gpu:NoSchedule"],"old":"x:NoExecute"}}}"#;
        let settings = parse_node_settings(body).unwrap();
        assert_eq!(settings.labels["team"], "ml");
        assert_eq!(settings.taints["dedicated"], ["gpu:NoSchedule"]);
        assert_eq!(settings.taints["old"], ["x:NoExecute"]);
    }

    #[test]
    fn wrapped_and_empty_trees_are_fine() {
        let wrapped = br#"{"settings":{"kubernetes":{"node-labels":{"a":"b"}}}}"#;
        assert_eq!(parse_node_settings(wrapped).unwrap().labels["a"], "b");
        assert_eq!(parse_node_settings(b"{}").unwrap(), NodeSettings::default());
        assert_eq!(
            parse_node_settings(br#"{"kubernetes":{}}"#).unwrap(),
            NodeSettings::default()
        );
    }

    #[test]
    fn wrong_shapes_are_errors_not_panics() {
        for body in [
            &b"not json"[..],
            b"[]",
            b"42",
            br#"{"kubernetes":[]}"#,
            br#"{"kubernetes":{"node-labels":[]}}"#,
            br#"{"kubernetes":{"node-labels":{"a":1}}}"#,
            br#"{"kubernetes":{"node-taints":{"a":[1]}}}"#,
            br#"{"kubernetes":{"node-taints":{"a":{}}}}"#,
        ] {
            assert!(
                parse_node_settings(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
