//! A fake Bottlerocket API on a Unix socket, for tests.
//!
//! It keeps a settings tree, answers `GET /settings`, stages
//! `PATCH /settings?tx=NAME` bodies per transaction, and merges a transaction
//! into the tree on `POST /tx/commit_and_apply?tx=NAME` — deep-merging objects
//! the way Bottlerocket's datastore keeps one value per leaf key. Every request
//! is recorded. Faults: answer 500 to the first N requests, or never answer.
//!
//! The server runs on its own thread and runtime, so the code under test can
//! be a separate process (the built binary) or the library in the same test.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// One request the fake API received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query, e.g. `/settings?tx=accelready`.
    pub uri: String,
    pub body: String,
}

/// How the fake API misbehaves.
#[derive(Debug, Clone, Copy, Default)]
pub enum Fault {
    #[default]
    None,
    /// Answer 500 to the first N requests.
    FailFirst(usize),
    /// Accept connections and never answer.
    Hang,
}

#[derive(Default)]
struct State {
    settings: Value,
    pending: HashMap<String, Value>,
    requests: Vec<Recorded>,
    fault: Fault,
    served: usize,
}

/// A running fake API. Dropping it stops nothing (the thread ends with the
/// test process); the socket lives in the caller's temp dir.
pub struct FakeApi {
    socket: PathBuf,
    state: Arc<Mutex<State>>,
}

impl FakeApi {
    /// Starts serving on `socket` with `settings` as the current tree
    /// (without the `settings.` prefix, e.g. `{"kubernetes": {...}}`).
    pub fn start(socket: &Path, settings: Value, fault: Fault) -> FakeApi {
        let state = Arc::new(Mutex::new(State {
            settings,
            fault,
            ..State::default()
        }));
        let listener =
            std::os::unix::net::UnixListener::bind(socket).expect("bind fake API socket");
        listener.set_nonblocking(true).unwrap();
        let shared = state.clone();
        thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::UnixListener::from_std(listener).unwrap();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let state = shared.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req| handle(state.clone(), req));
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        FakeApi {
            socket: socket.to_path_buf(),
            state,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The committed settings tree.
    pub fn settings(&self) -> Value {
        self.state.lock().unwrap().settings.clone()
    }
}

async fn handle(
    state: Arc<Mutex<State>>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let method = req.method().to_string();
    let uri = req.uri().to_string();
    let path = req.uri().path().to_owned();
    let tx = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("tx=")))
        .map(str::to_owned);
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body = String::from_utf8_lossy(&body).into_owned();

    let fault = {
        let mut s = state.lock().unwrap();
        s.requests.push(Recorded {
            method: method.clone(),
            uri,
            body: body.clone(),
        });
        s.served += 1;
        s.fault
    };
    match fault {
        Fault::Hang => std::future::pending::<()>().await,
        Fault::FailFirst(n) if state.lock().unwrap().served <= n => {
            return Ok(reply(StatusCode::INTERNAL_SERVER_ERROR, "injected failure"));
        }
        _ => {}
    }

    let mut s = state.lock().unwrap();
    let response = match (method.as_str(), path.as_str()) {
        ("GET", "/settings") => reply(StatusCode::OK, &s.settings.to_string()),
        ("PATCH", "/settings") => match serde_json::from_str::<Value>(&body) {
            Ok(patch) if patch.is_object() => {
                let tx = tx.unwrap_or_else(|| "default".into());
                let pending = s
                    .pending
                    .entry(tx)
                    .or_insert_with(|| Value::Object(Default::default()));
                merge(pending, &patch);
                reply(StatusCode::NO_CONTENT, "")
            }
            _ => reply(StatusCode::BAD_REQUEST, "body is not a JSON object"),
        },
        ("POST", "/tx/commit_and_apply") => {
            let tx = tx.unwrap_or_else(|| "default".into());
            match s.pending.remove(&tx) {
                Some(patch) => {
                    merge(&mut s.settings, &patch);
                    reply(StatusCode::OK, "[]")
                }
                None => reply(StatusCode::NOT_FOUND, "no such transaction"),
            }
        }
        _ => reply(StatusCode::NOT_FOUND, "not modelled by the fake API"),
    };
    Ok(response)
}

fn reply(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

/// Deep merge: objects merge key by key; anything else is replaced.
fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(into), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(into.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (into, patch) => *into = patch.clone(),
    }
}
