//! Fetch: stream a bundle over HTTPS into a temporary file on the install
//! filesystem while hashing it; constant memory whatever the size. A local
//! bundle (`file:///ABS/PATH`) takes the same path without the network: it
//! is copied into that temporary file while hashed ([`copy_file`]).
//!
//! Retries (exponential backoff with jitter) only on connection errors, broken
//! bodies, read timeouts, 408, 429 and 5xx. `Retry-After` is honoured in both
//! its forms (seconds and HTTP-date), capped, with jitter added so that a
//! fleet turned away at once does not come back at once; such answers, and
//! attempts that received part of the bundle, do not use up the attempts (the
//! overall deadline bounds them). After a broken body the next attempt asks
//! for the rest with `Range`; a server that answers `200` instead restarts the
//! file. Redirects to `http://` are refused. Proxies: reqwest honours
//! `HTTPS_PROXY` / `NO_PROXY` from the environment.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, CONTENT_RANGE, DATE, RANGE, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use super::options::{test_pause, Progress, Timeouts};
use super::progress::Meter;
use crate::input::{self, InputError, Limit};

/// Most redirects followed before giving up.
const MAX_REDIRECTS: usize = 10;
/// Body chunks are a TLS record or so (16 KiB): gather them into fewer,
/// larger writes.
const WRITE_BUFFER: usize = 256 << 10;

/// What [`fetch`] needs.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    pub url: Url,
    /// Expected digest, lowercase hex.
    pub sha256: String,
    pub max_bytes: u64,
    pub timeouts: Timeouts,
    pub allow_insecure_http: bool,
    /// Extra trusted CA certificates (PEM) on this machine.
    pub ca_bundle: Option<PathBuf>,
    pub progress: Progress,
}

/// A finished, verified download.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    pub bytes: u64,
    pub attempts: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("cannot read the CA bundle '{path}'")]
    CaBundleRead {
        path: PathBuf,
        #[source]
        source: InputError,
    },
    #[error("the CA bundle '{path}' holds no usable PEM certificate")]
    CaBundleParse {
        path: PathBuf,
        #[source]
        source: Option<reqwest::Error>,
    },
    #[error("cannot set up the HTTPS client")]
    Client(#[source] reqwest::Error),
    #[error("'{url}' redirected to an insecure or unusable location")]
    Redirect {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("'{url}' answered {status}")]
    Status { url: String, status: StatusCode },
    #[error("'{url}' is larger than the limit of {limit} bytes")]
    TooLarge { url: String, limit: u64 },
    #[error("cannot write the download of '{url}' to '{path}'")]
    Write {
        url: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("sha256 mismatch for '{url}': expected {expected}, got {actual}")]
    DigestMismatch {
        url: String,
        expected: String,
        actual: String,
    },
    /// The `file://` URL names nothing usable: missing, unreadable, or not
    /// a regular file (the operator's configuration).
    #[error("cannot read the local bundle '{path}'")]
    LocalOpen {
        path: PathBuf,
        #[source]
        source: input::InputError,
    },
    #[error("cannot read the local bundle '{path}'")]
    Local {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("giving up on '{url}' after {attempts} attempts")]
    GaveUp {
        url: String,
        attempts: u32,
        #[source]
        last: Box<Transient>,
    },
}

impl FetchError {
    /// Errors the operator's configuration caused.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            FetchError::CaBundleRead { .. }
                | FetchError::CaBundleParse { .. }
                | FetchError::Redirect { .. }
                | FetchError::LocalOpen { .. }
        )
    }
}

/// A failure worth retrying.
#[derive(Debug, thiserror::Error)]
pub enum Transient {
    #[error("request failed")]
    Request(#[source] reqwest::Error),
    #[error("answered {status}")]
    Status {
        status: StatusCode,
        retry_after: Option<Duration>,
    },
    #[error("connection broke after {received} bytes")]
    Body {
        received: u64,
        #[source]
        source: reqwest::Error,
    },
    #[error("no data for {0:?} (read timeout)")]
    ReadTimeout(Duration),
}

impl Transient {
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Transient::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

enum AttemptError {
    Retry(Transient),
    Fatal(FetchError),
}

/// Builds the HTTPS client: webpki roots plus `ca_bundle`, timeouts, and a
/// redirect policy that refuses to leave https.
pub fn client(options: &FetchOptions) -> Result<reqwest::Client, FetchError> {
    let allow_http = options.allow_insecure_http;
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else if attempt.url().scheme() != "https" && !allow_http {
            let message = format!(
                "refusing redirect to '{}': only https:// is allowed (--allow-insecure-http permits http://)",
                attempt.url()
            );
            attempt.error(message)
        } else {
            attempt.follow()
        }
    });
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .connect_timeout(options.timeouts.connect)
        .read_timeout(options.timeouts.read)
        .redirect(policy);
    if let Some(path) = &options.ca_bundle {
        for certificate in read_ca_bundle(path)? {
            builder = builder.add_root_certificate(certificate);
        }
    }
    builder.build().map_err(FetchError::Client)
}

/// The most a `--ca-bundle` file may hold: a PEM bundle of every public root
/// (Mozilla's) is about 220 KB.
pub const MAX_CA_BUNDLE: Limit = Limit::new(4 << 20, "for a CA bundle");

fn read_ca_bundle(path: &Path) -> Result<Vec<reqwest::Certificate>, FetchError> {
    let pem =
        input::read_regular(path, MAX_CA_BUNDLE).map_err(|source| FetchError::CaBundleRead {
            path: path.to_path_buf(),
            source,
        })?;
    let certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| {
        FetchError::CaBundleParse {
            path: path.to_path_buf(),
            source: Some(source),
        }
    })?;
    if certificates.is_empty() {
        return Err(FetchError::CaBundleParse {
            path: path.to_path_buf(),
            source: None,
        });
    }
    Ok(certificates)
}

/// Downloads `options.url` to `dest` (created or truncated), verifying the
/// sha256 at the end of the stream; on mismatch `dest` is deleted.
pub async fn fetch(options: &FetchOptions, dest: &Path) -> Result<Fetched, FetchError> {
    let client = client(options)?;
    let mut download = Download {
        options,
        dest,
        file: BufWriter::with_capacity(
            WRITE_BUFFER,
            OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(dest)
                .map_err(|source| write_error(options, dest, source))?,
        ),
        hasher: Sha256::new(),
        written: 0,
        meter: Meter::new(options.progress, options.url.as_str()),
    };
    let result = download.run(&client).await;
    if result.is_err() {
        let _ = fs::remove_file(dest);
    }
    result
}

/// Copies a local bundle (a `file://` URL, `path` on this machine) to `dest`
/// (created or truncated), hashing while copying, with the same size limit
/// and digest check as a download and no network. On any error `dest` is
/// deleted. Copying first, rather than unpacking the file in place, means
/// that what is unpacked is exactly what was hashed, even if the file changes
/// meanwhile.
pub async fn copy_file(
    path: &Path,
    url: &str,
    sha256: &str,
    max_bytes: u64,
    dest: &Path,
) -> Result<Fetched, FetchError> {
    let read_error = |source| FetchError::Local {
        path: path.to_path_buf(),
        source,
    };
    let write_error = |source| FetchError::Write {
        url: url.to_owned(),
        path: dest.to_path_buf(),
        source,
    };
    let result = async {
        let mut source =
            input::open_regular_file(path).map_err(|source| FetchError::LocalOpen {
                path: path.to_path_buf(),
                source,
            })?;
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(dest)
            .map_err(write_error)?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 1 << 20];
        let mut written = 0u64;
        loop {
            let n = match source.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_error(e)),
            };
            written = written.saturating_add(n as u64);
            if written > max_bytes {
                return Err(FetchError::TooLarge {
                    url: url.to_owned(),
                    limit: max_bytes,
                });
            }
            file.write_all(&buffer[..n]).map_err(write_error)?;
            hasher.update(&buffer[..n]);
            test_pause("fetch-partial");
            // Each chunk is a point where the caller's deadline can stop the copy.
            tokio::task::yield_now().await;
        }
        // No fsync, as for a download: the copy is scratch, deleted once
        // unpacked.
        let actual = hex::encode(hasher.finalize());
        if actual != sha256 {
            return Err(FetchError::DigestMismatch {
                url: url.to_owned(),
                expected: sha256.to_owned(),
                actual,
            });
        }
        Ok(Fetched {
            bytes: written,
            attempts: 1,
        })
    }
    .await;
    if result.is_err() {
        let _ = fs::remove_file(dest);
    }
    result
}

struct Download<'a> {
    options: &'a FetchOptions,
    dest: &'a Path,
    file: BufWriter<File>,
    hasher: Sha256,
    written: u64,
    meter: Meter,
}

impl Download<'_> {
    async fn run(&mut self, client: &reqwest::Client) -> Result<Fetched, FetchError> {
        let timeouts = self.options.timeouts;
        let mut attempts = 0;
        // Consecutive failures without progress; what max_attempts caps.
        let mut failures = 0;
        loop {
            attempts += 1;
            let before = self.written;
            match self.attempt(client).await {
                Ok(()) => break,
                Err(AttemptError::Fatal(e)) => return Err(e),
                Err(AttemptError::Retry(transient)) => {
                    if self.written > before {
                        failures = 0;
                    } else if transient.retry_after().is_none() {
                        failures += 1;
                    }
                    if failures >= timeouts.max_attempts {
                        return Err(FetchError::GaveUp {
                            url: self.options.url.to_string(),
                            attempts,
                            last: Box::new(transient),
                        });
                    }
                    let delay = retry_delay(&transient, &timeouts, failures.max(1));
                    let url = &self.options.url;
                    self.meter.suspend(|| {
                        warn!(url = %url, attempt = attempts, error = %transient, delay_ms = delay.as_millis() as u64, received = self.written, "download failed; retrying");
                    });
                    tokio::time::sleep(delay).await;
                }
            }
        }
        // No fsync: the download is scratch, read back from the page cache
        // and deleted once unpacked; a crash leaves it to the next run's
        // clean-up. (What gets installed is fsynced, file by file.)
        self.file
            .flush()
            .map_err(|source| write_error(self.options, self.dest, source))?;
        let actual = hex::encode(std::mem::take(&mut self.hasher).finalize());
        if actual != self.options.sha256 {
            return Err(FetchError::DigestMismatch {
                url: self.options.url.to_string(),
                expected: self.options.sha256.clone(),
                actual,
            });
        }
        Ok(Fetched {
            bytes: self.written,
            attempts,
        })
    }

    async fn attempt(&mut self, client: &reqwest::Client) -> Result<(), AttemptError> {
        let url = &self.options.url;
        let mut request = client.get(url.clone());
        if self.written > 0 {
            request = request.header(RANGE, format!("bytes={}-", self.written));
        }
        let mut response = request.send().await.map_err(|e| {
            if e.is_redirect() {
                AttemptError::Fatal(FetchError::Redirect {
                    url: url.to_string(),
                    source: e,
                })
            } else {
                AttemptError::Retry(Transient::Request(e))
            }
        })?;
        let status = response.status();
        if status == StatusCode::PARTIAL_CONTENT && self.written > 0 {
            let expected = format!("bytes {}-", self.written);
            let resumes = response
                .headers()
                .get(CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with(&expected));
            if !resumes {
                // Not the range we asked for: start over on the next attempt.
                self.restart()?;
                return Err(AttemptError::Retry(Transient::Status {
                    status,
                    retry_after: None,
                }));
            }
            info!(url = %url, from = self.written, "resuming download");
        } else if status.is_success() {
            if self.written > 0 {
                debug!(url = %url, "server ignored Range; downloading from the start");
                self.restart()?;
            }
        } else if is_retryable(status) {
            let retry_after = retry_after(response.headers(), SystemTime::now());
            return Err(AttemptError::Retry(Transient::Status {
                status,
                retry_after,
            }));
        } else {
            return Err(AttemptError::Fatal(FetchError::Status {
                url: url.to_string(),
                status,
            }));
        }
        let limit = self.options.max_bytes;
        let total = response
            .content_length()
            .map(|len| self.written.saturating_add(len));
        if total.is_some_and(|total| total > limit) {
            return Err(AttemptError::Fatal(FetchError::TooLarge {
                url: url.to_string(),
                limit,
            }));
        }
        self.meter.set_total(total);
        let read_timeout = self.options.timeouts.read;
        loop {
            let chunk = match tokio::time::timeout(read_timeout, response.chunk()).await {
                Err(_) => return Err(AttemptError::Retry(Transient::ReadTimeout(read_timeout))),
                Ok(Err(source)) => {
                    return Err(AttemptError::Retry(Transient::Body {
                        received: self.written,
                        source,
                    }))
                }
                Ok(Ok(None)) => return Ok(()),
                Ok(Ok(Some(chunk))) => chunk,
            };
            let len = chunk.len() as u64;
            if self.written.saturating_add(len) > limit {
                return Err(AttemptError::Fatal(FetchError::TooLarge {
                    url: url.to_string(),
                    limit,
                }));
            }
            self.file.write_all(&chunk).map_err(|source| {
                AttemptError::Fatal(write_error(self.options, self.dest, source))
            })?;
            self.hasher.update(&chunk);
            self.written += len;
            self.meter.update(self.written);
            test_pause("fetch-partial");
        }
    }

    fn restart(&mut self) -> Result<(), AttemptError> {
        self.file
            .flush()
            .and_then(|()| self.file.get_ref().set_len(0))
            .and_then(|()| self.file.rewind())
            .map_err(|source| AttemptError::Fatal(write_error(self.options, self.dest, source)))?;
        self.hasher = Sha256::new();
        self.written = 0;
        Ok(())
    }
}

fn write_error(options: &FetchOptions, dest: &Path, source: io::Error) -> FetchError {
    FetchError::Write {
        url: options.url.to_string(),
        path: dest.to_path_buf(),
        source,
    }
}

/// 408, 429 and 5xx are worth another try; every other status is final.
pub fn is_retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

/// The wait a response's `Retry-After` asks for, if it has a usable one.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    parse_retry_after(text(RETRY_AFTER)?, text(DATE), now)
}

/// `Retry-After` (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date in any of
/// the three forms a recipient must accept (IMF-fixdate, RFC 850, asctime).
/// A date is measured from the response's `Date` when it has one — the
/// server's clock against the server's clock, as a node's may still be wrong
/// early in boot — else from `now`; a date in the past means "now".
pub fn parse_retry_after(value: &str, date: Option<&str>, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let reference = date
        .and_then(|d| httpdate::parse_http_date(d.trim()).ok())
        .unwrap_or(now);
    Some(at.duration_since(reference).unwrap_or(Duration::ZERO))
}

/// The wait before the next attempt. A server's `Retry-After` (at most
/// `retry_after_max`) plus a random extra of up to half as much again (at
/// least up to `backoff_base`): clients turned away at the same moment come
/// back spread out, not in lockstep. Otherwise [`backoff`] for the
/// `failures`-th consecutive failure.
pub fn retry_delay(transient: &Transient, timeouts: &Timeouts, failures: u32) -> Duration {
    match transient.retry_after() {
        Some(asked) => {
            let asked = asked.min(timeouts.retry_after_max);
            asked + jitter(asked, timeouts)
        }
        None => backoff(timeouts, failures),
    }
}

fn jitter(asked: Duration, timeouts: &Timeouts) -> Duration {
    (asked / 2)
        .max(timeouts.backoff_base)
        .mul_f64(fastrand::f64())
}

/// Exponential backoff with "equal jitter": half fixed, half random, capped.
pub fn backoff(timeouts: &Timeouts, attempt: u32) -> Duration {
    let exponent = attempt.saturating_sub(1).min(16);
    let full = timeouts
        .backoff_base
        .saturating_mul(1 << exponent)
        .min(timeouts.backoff_cap);
    let half = full / 2;
    half + half.mul_f64(fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_408_429_and_5xx_are_retried() {
        for (code, retry) in [
            (408, true),
            (429, true),
            (500, true),
            (503, true),
            (404, false),
            (403, false),
            (400, false),
        ] {
            assert_eq!(
                is_retryable(StatusCode::from_u16(code).unwrap()),
                retry,
                "{code}"
            );
        }
    }

    #[test]
    fn retry_after_seconds() {
        let now = SystemTime::now();
        assert_eq!(
            parse_retry_after(" 3 ", None, now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(parse_retry_after("0", None, now), Some(Duration::ZERO));
        for bad in ["", "-1", "1.5", "soon", "Wed, 21 Oct 2015 07:28:00"] {
            assert_eq!(parse_retry_after(bad, None, now), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_after_http_date_in_all_three_forms() {
        // 2015-10-21T07:28:00Z
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        for value in [
            "Wed, 21 Oct 2015 07:28:30 GMT",     // IMF-fixdate
            "Wednesday, 21-Oct-15 07:28:30 GMT", // RFC 850 (obsolete)
            "Wed Oct 21 07:28:30 2015",          // asctime (obsolete)
        ] {
            assert_eq!(
                parse_retry_after(value, None, now),
                Some(Duration::from_secs(30)),
                "{value}"
            );
        }
        // A date in the past: retry now.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", None, now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_date_is_measured_from_the_servers_date() {
        // The node's clock is an hour behind (early boot); the server's is right.
        let node_now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480 - 3600);
        assert_eq!(
            parse_retry_after(
                "Wed, 21 Oct 2015 07:28:10 GMT",
                Some("Wed, 21 Oct 2015 07:28:00 GMT"),
                node_now
            ),
            Some(Duration::from_secs(10))
        );
        // An unreadable Date: our own clock.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", Some("yesterday"), node_now),
            Some(Duration::from_secs(3610))
        );
    }

    #[test]
    fn retry_after_is_capped_and_jittered_upwards() {
        let timeouts = Timeouts {
            backoff_base: Duration::from_millis(100),
            retry_after_max: Duration::from_secs(30),
            ..Timeouts::default()
        };
        let throttled = |secs| Transient::Status {
            status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after: Some(Duration::from_secs(secs)),
        };
        let mut delays = Vec::new();
        for _ in 0..200 {
            let delay = retry_delay(&throttled(2), &timeouts, 1);
            assert!(
                delay >= Duration::from_secs(2) && delay <= Duration::from_secs(3),
                "{delay:?}"
            );
            delays.push(delay);
            // A day is cut to the cap (plus at most half of it).
            let capped = retry_delay(&throttled(86_400), &timeouts, 1);
            assert!(
                capped >= Duration::from_secs(30) && capped <= Duration::from_secs(45),
                "{capped:?}"
            );
            // Retry-After: 0 still spreads out, by up to backoff_base.
            assert!(retry_delay(&throttled(0), &timeouts, 1) <= Duration::from_millis(100));
        }
        delays.sort();
        delays.dedup();
        assert!(delays.len() > 100, "jitter spreads the retries out");
        // Without Retry-After: the exponential backoff.
        let failed = Transient::Status {
            status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after: None,
        };
        assert!(retry_delay(&failed, &timeouts, 1) <= Duration::from_millis(100));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let timeouts = Timeouts {
            backoff_base: Duration::from_millis(100),
            backoff_cap: Duration::from_millis(1000),
            ..Timeouts::default()
        };
        for _ in 0..50 {
            let first = backoff(&timeouts, 1);
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
            let third = backoff(&timeouts, 3);
            assert!(third >= Duration::from_millis(200) && third <= Duration::from_millis(400));
            assert!(backoff(&timeouts, 30) <= Duration::from_millis(1000));
        }
    }
}
