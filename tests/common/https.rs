//! An in-process HTTPS server for bundle downloads, with fault injection.
//!
//! It speaks just enough HTTP/1.1 by hand (one request per connection,
//! `Connection: close`) over tokio-rustls, so that a fault can cut a body at an
//! exact byte, reset the TCP connection or stall mid-stream — things a
//! well-behaved server library will not do on purpose.
//!
//! ```ignore
//! let server = https::Server::start(bundle_bytes);
//! server.script([Fault::Status(503), Fault::Ok]);     // then Ok forever
//! let url = server.url("/dcgm.deb");                   // https://localhost:PORT/dcgm.deb
//! // client trusts server.ca_file() (e.g. `--ca-bundle`)
//! assert_eq!(server.requests().len(), 2);
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// What the server does with one request (consumed in order; then `Ok`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Serve the body (honouring `Range: bytes=N-` when ranges are on).
    Ok,
    /// Answer this status with an empty body.
    Status(u16),
    /// 429 with `Retry-After: <secs>`.
    RetryAfter(u64),
    /// 503 with `Retry-After: <HTTP-date this many seconds after Date>` and a
    /// `Date` header an hour behind this machine's clock (a server clock the
    /// client must measure against, not its own).
    RetryAfterDate(u64),
    /// Send this many body bytes, then reset the TCP connection (RST).
    ResetAfter(usize),
    /// Send this many body bytes of a full `Content-Length`, then close.
    Truncate(usize),
    /// Serve the body with its bytes flipped (same length).
    WrongBytes,
    /// Send the headers and a first chunk, then stall this long.
    Stall(Duration),
    /// 302 to this location.
    RedirectTo(String),
}

/// One request the server saw.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub range: Option<String>,
    pub at: Instant,
    pub fault: Fault,
}

struct State {
    body: Arc<Vec<u8>>,
    script: VecDeque<Fault>,
    ranges: bool,
    requests: Vec<Recorded>,
}

/// The running server; it lives until the test process exits.
pub struct Server {
    pub addr: SocketAddr,
    pub cert_pem: String,
    ca_file: PathBuf,
    _dir: tempfile::TempDir,
    state: Arc<Mutex<State>>,
}

/// A fresh self-signed certificate for `localhost`: the TLS acceptor that
/// serves it, and its PEM for clients to trust.
pub fn localhost_tls() -> (TlsAcceptor, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
        .expect("generate certificate");
    let cert_pem = certified.cert.pem();
    let cert = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server config");
    (TlsAcceptor::from(Arc::new(config)), cert_pem)
}

impl Server {
    /// Starts serving `body` at every path, on `127.0.0.1:<random port>`.
    pub fn start(body: Vec<u8>) -> Server {
        let (acceptor, cert_pem) = localhost_tls();
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, &cert_pem).expect("write CA file");
        let state = Arc::new(Mutex::new(State {
            body: Arc::new(body),
            script: VecDeque::new(),
            ranges: true,
            requests: Vec::new(),
        }));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let serving = state.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("server runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("listener");
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let acceptor = acceptor.clone();
                    let state = serving.clone();
                    tokio::spawn(async move {
                        let _ = handle(acceptor, tcp, state).await;
                    });
                }
            });
        });
        Server {
            addr,
            cert_pem,
            ca_file,
            _dir: dir,
            state,
        }
    }

    /// `https://localhost:<port><path>` (the certificate is for `localhost`).
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    /// A PEM file with the server's certificate, for `--ca-bundle`.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// Faults for the next requests, in order (appended to what is left).
    pub fn script(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.lock().unwrap().script.extend(faults);
    }

    /// Whether `Range` requests are honoured (default: yes).
    pub fn set_ranges(&self, on: bool) {
        self.state.lock().unwrap().ranges = on;
    }

    /// Replaces the body served from now on.
    pub fn set_body(&self, body: Vec<u8>) {
        self.state.lock().unwrap().body = Arc::new(body);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }
}

async fn handle(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    state: Arc<Mutex<State>>,
) -> std::io::Result<()> {
    let mut tls = acceptor.accept(tcp).await?;
    let Some(head) = read_head(&mut tls).await? else {
        return Ok(());
    };
    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
    let range = header(&head, "range").map(str::to_owned);
    let (fault, body, ranges) = {
        let mut state = state.lock().unwrap();
        let fault = state.script.pop_front().unwrap_or(Fault::Ok);
        state.requests.push(Recorded {
            path,
            range: range.clone(),
            at: Instant::now(),
            fault: fault.clone(),
        });
        (fault, state.body.clone(), state.ranges)
    };
    let empty = |status: u16, extra: &str| {
        format!("HTTP/1.1 {status} Fault\r\nContent-Length: 0\r\nConnection: close\r\n{extra}\r\n")
    };
    match &fault {
        Fault::Status(code) => return finish(tls, empty(*code, "").as_bytes()).await,
        Fault::RetryAfter(secs) => {
            return finish(
                tls,
                empty(429, &format!("Retry-After: {secs}\r\n")).as_bytes(),
            )
            .await
        }
        Fault::RetryAfterDate(secs) => {
            let date = std::time::SystemTime::now() - Duration::from_secs(3600);
            let headers = format!(
                "Date: {}\r\nRetry-After: {}\r\n",
                httpdate::fmt_http_date(date),
                httpdate::fmt_http_date(date + Duration::from_secs(*secs))
            );
            return finish(tls, empty(503, &headers).as_bytes()).await;
        }
        Fault::RedirectTo(location) => {
            return finish(
                tls,
                empty(302, &format!("Location: {location}\r\n")).as_bytes(),
            )
            .await
        }
        _ => {}
    }
    let start = match (&range, ranges) {
        (Some(range), true) => range
            .strip_prefix("bytes=")
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n <= body.len()),
        _ => None,
    };
    let total = body.len();
    let header = match start {
        Some(start) => format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{}/{total}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n",
            total - start,
            total.saturating_sub(1)
        ),
        None => format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {total}\r\nAccept-Ranges: {}\r\nConnection: close\r\n\r\n",
            if ranges { "bytes" } else { "none" }
        ),
    };
    let slice = &body[start.unwrap_or(0)..];
    tls.write_all(header.as_bytes()).await?;
    match fault {
        Fault::Ok => write_chunks(&mut tls, slice).await?,
        Fault::WrongBytes => {
            let flipped: Vec<u8> = slice.iter().map(|b| !b).collect();
            write_chunks(&mut tls, &flipped).await?;
        }
        Fault::Truncate(n) => {
            write_chunks(&mut tls, &slice[..n.min(slice.len())]).await?;
        }
        Fault::ResetAfter(n) => {
            write_chunks(&mut tls, &slice[..n.min(slice.len())]).await?;
            tls.flush().await?;
            let (tcp, _) = tls.into_inner();
            #[allow(deprecated)] // SO_LINGER 0 is exactly the RST we want.
            tcp.set_linger(Some(Duration::ZERO))?;
            drop(tcp);
            return Ok(());
        }
        Fault::Stall(duration) => {
            write_chunks(&mut tls, &slice[..slice.len().min(1024)]).await?;
            tls.flush().await?;
            tokio::time::sleep(duration).await;
            return Ok(());
        }
        Fault::Status(_)
        | Fault::RetryAfter(_)
        | Fault::RetryAfterDate(_)
        | Fault::RedirectTo(_) => unreachable!(),
    }
    tls.flush().await?;
    tls.shutdown().await
}

/// Reads a request's head (up to the blank line); `None` if the client went
/// away or sent more than 64 KiB of it.
pub async fn read_head(
    tls: &mut tokio_rustls::server::TlsStream<TcpStream>,
) -> std::io::Result<Option<String>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tls.read(&mut buf).await?;
        if n == 0 || head.len() > 64 * 1024 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(Some(String::from_utf8_lossy(&head).into_owned()))
}

/// The value of header `name` (any case) in a request head.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

async fn write_chunks(
    tls: &mut tokio_rustls::server::TlsStream<TcpStream>,
    bytes: &[u8],
) -> std::io::Result<()> {
    for chunk in bytes.chunks(64 * 1024) {
        tls.write_all(chunk).await?;
    }
    Ok(())
}

async fn finish(
    mut tls: tokio_rustls::server::TlsStream<TcpStream>,
    bytes: &[u8],
) -> std::io::Result<()> {
    tls.write_all(bytes).await?;
    tls.flush().await?;
    tls.shutdown().await
}
