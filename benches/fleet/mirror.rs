//! A loopback HTTPS mirror the way a busy one behaves: it serves at most
//! `max_active` responses at once and turns the rest away — `503` with
//! `Retry-After: <seconds>` and `429` with `Retry-After: <HTTP-date>` (and a
//! `Date`), alternately — honours `Range: bytes=N-`, can cut a share of its
//! responses mid-body, and can cap its total bandwidth (shared by the
//! responses in flight, as a mirror's uplink is). It counts what it did, for
//! the fleet report.
//!
//! Hand-written HTTP/1.1 (one request per connection, `Connection: close`)
//! over tokio-rustls, like the tests' server (`tests/common/https.rs`), whose
//! certificate set-up it shares.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::common::https::{header, localhost_tls, read_head};

/// How the mirror behaves; changeable between fleet runs.
#[derive(Debug, Clone, Copy)]
pub struct Behaviour {
    /// Most responses served at once (the rest are turned away).
    pub max_active: u64,
    /// What `Retry-After` asks for when turning a client away.
    pub retry_after: Duration,
    /// Share of served responses cut at a random point mid-body, in percent.
    pub cut_percent: u64,
    /// Total body bytes per second for all responses together; 0: as fast
    /// as the machine goes.
    pub bytes_per_second: u64,
}

/// What the mirror did since the last [`Mirror::reset`].
#[derive(Debug, Default)]
pub struct Stats {
    pub connections: AtomicU64,
    pub open: AtomicU64,
    pub peak_open: AtomicU64,
    pub active: AtomicU64,
    pub peak_active: AtomicU64,
    pub served: AtomicU64,
    pub ranged: AtomicU64,
    pub turned_away_503: AtomicU64,
    pub turned_away_429: AtomicU64,
    pub cut: AtomicU64,
    /// Body bytes written to clients (cut responses included).
    pub body_bytes: AtomicU64,
}

impl Stats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(SeqCst)
    }
}

struct Shared {
    body: Arc<Vec<u8>>,
    behaviour: std::sync::Mutex<Behaviour>,
    stats: Stats,
    /// When the uplink is free again (the bandwidth cap's clock).
    uplink_free_at: std::sync::Mutex<Instant>,
}

impl Shared {
    /// Waits for this chunk's turn on the capped uplink.
    async fn pace(&self, bytes: usize, bytes_per_second: u64) {
        if bytes_per_second == 0 {
            return;
        }
        let wait = {
            let mut free_at = self.uplink_free_at.lock().unwrap();
            let now = Instant::now();
            let start = (*free_at).max(now);
            *free_at = start + Duration::from_secs_f64(bytes as f64 / bytes_per_second as f64);
            start - now
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

pub struct Mirror {
    pub addr: SocketAddr,
    ca_file: PathBuf,
    _dir: tempfile::TempDir,
    shared: Arc<Shared>,
}

impl Mirror {
    /// Serves `body` at every path on `127.0.0.1:<random port>` from a
    /// runtime of `threads` worker threads.
    pub fn start(body: Vec<u8>, behaviour: Behaviour, threads: usize) -> Mirror {
        let (acceptor, cert_pem) = localhost_tls();
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, cert_pem).expect("write CA file");
        let shared = Arc::new(Shared {
            body: Arc::new(body),
            behaviour: std::sync::Mutex::new(behaviour),
            stats: Stats::default(),
            uplink_free_at: std::sync::Mutex::new(Instant::now()),
        });
        // A deep backlog: a fleet connects at once.
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_reuseaddr(true).expect("reuseaddr");
        socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
        let addr = socket.local_addr().expect("local addr");
        let serving = shared.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .enable_all()
                .build()
                .expect("mirror runtime");
            runtime.block_on(async move {
                let listener: TcpListener = socket.listen(4096).expect("listen");
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let (acceptor, shared) = (acceptor.clone(), serving.clone());
                    tokio::spawn(async move {
                        let stats = &shared.stats;
                        stats.connections.fetch_add(1, SeqCst);
                        let open = stats.open.fetch_add(1, SeqCst) + 1;
                        stats.peak_open.fetch_max(open, SeqCst);
                        let _ = handle(acceptor, tcp, &shared).await;
                        stats.open.fetch_sub(1, SeqCst);
                    });
                }
            });
        });
        Mirror {
            addr,
            ca_file,
            _dir: dir,
            shared,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// New behaviour and zeroed counters, between runs.
    pub fn reset(&self, behaviour: Behaviour) {
        *self.shared.behaviour.lock().unwrap() = behaviour;
        let s = &self.shared.stats;
        for counter in [
            &s.connections,
            &s.peak_open,
            &s.peak_active,
            &s.served,
            &s.ranged,
            &s.turned_away_503,
            &s.turned_away_429,
            &s.cut,
            &s.body_bytes,
        ] {
            counter.store(0, SeqCst);
        }
        s.peak_open.store(s.open.load(SeqCst), SeqCst);
    }
}

/// Releases a serving slot however the response ends.
struct Slot<'a>(&'a Stats);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, SeqCst);
    }
}

async fn handle(acceptor: TlsAcceptor, tcp: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut tls = acceptor.accept(tcp).await?;
    let Some(head) = read_head(&mut tls).await? else {
        return Ok(());
    };
    let range_start = header(&head, "range").and_then(|r| {
        r.strip_prefix("bytes=")?
            .strip_suffix('-')?
            .parse::<usize>()
            .ok()
    });
    let behaviour = *shared.behaviour.lock().unwrap();
    let stats = &shared.stats;
    let admitted = stats
        .active
        .fetch_update(SeqCst, SeqCst, |n| {
            (n < behaviour.max_active).then_some(n + 1)
        })
        .is_ok();
    let now = SystemTime::now();
    let date = httpdate::fmt_http_date(now);
    if !admitted {
        // Alternate the two ways a busy server says "later".
        let n = stats.turned_away_503.load(SeqCst) + stats.turned_away_429.load(SeqCst);
        let answer = if n % 2 == 0 {
            stats.turned_away_503.fetch_add(1, SeqCst);
            format!(
                "HTTP/1.1 503 Service Unavailable\r\nDate: {date}\r\nRetry-After: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                behaviour.retry_after.as_secs()
            )
        } else {
            stats.turned_away_429.fetch_add(1, SeqCst);
            let at = httpdate::fmt_http_date(now + behaviour.retry_after);
            format!(
                "HTTP/1.1 429 Too Many Requests\r\nDate: {date}\r\nRetry-After: {at}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
        };
        tls.write_all(answer.as_bytes()).await?;
        tls.flush().await?;
        return tls.shutdown().await;
    }
    let _slot = Slot(stats);
    let peak = stats.active.load(SeqCst);
    stats.peak_active.fetch_max(peak, SeqCst);
    stats.served.fetch_add(1, SeqCst);
    let body = shared.body.clone();
    let total = body.len();
    let start = range_start.filter(|s| *s < total);
    let header = match start {
        Some(start) => {
            stats.ranged.fetch_add(1, SeqCst);
            format!(
                "HTTP/1.1 206 Partial Content\r\nDate: {date}\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{}/{total}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n",
                total - start,
                total - 1
            )
        }
        None => format!(
            "HTTP/1.1 200 OK\r\nDate: {date}\r\nContent-Length: {total}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n"
        ),
    };
    let slice = &body[start.unwrap_or(0)..];
    let cut_at = (fastrand::u64(0..100) < behaviour.cut_percent)
        .then(|| fastrand::usize(0..slice.len().max(1)));
    tls.write_all(header.as_bytes()).await?;
    let sent = &slice[..cut_at.unwrap_or(slice.len())];
    for chunk in sent.chunks(64 * 1024) {
        shared.pace(chunk.len(), behaviour.bytes_per_second).await;
        tls.write_all(chunk).await?;
        stats.body_bytes.fetch_add(chunk.len() as u64, SeqCst);
    }
    tls.flush().await?;
    if cut_at.is_some() {
        // Mid-body: the client has fewer bytes than Content-Length said.
        stats.cut.fetch_add(1, SeqCst);
        let (tcp, _) = tls.into_inner();
        drop(tcp);
        return Ok(());
    }
    tls.shutdown().await
}
