//! A small HTTP/1.1 client over tokio's `TcpStream`: one connection per request
//! (`Connection: close`), plain or chunked bodies, SSE events handed out as they arrive
//! with the instant their bytes were read.
//!
//! NOTE: hand-rolled instead of a client crate because it needs no TLS (benchmarks talk to
//! local servers), adds no dependency, and shows exactly when bytes arrived: the timestamps
//! are the measurement.

use crate::error::{BenchError, Result};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where the server listens: `http://host:port[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl {
    pub host: String,
    pub port: u16,
    /// Path prefix without a trailing slash (`""` or `"/v1"`-style roots).
    pub prefix: String,
}

impl BaseUrl {
    pub fn parse(url: &str) -> Result<BaseUrl> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            BenchError::msg(format!(
                "--base-url {url:?} must start with http:// (no TLS)"
            ))
        })?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse::<u16>().map_err(|_| {
                    BenchError::msg(format!("--base-url port {p:?} is not a number 0..65535"))
                })?,
            ),
            None => (hostport, 80),
        };
        if host.is_empty() {
            return Err(BenchError::msg(format!("--base-url {url:?} has no host")));
        }
        Ok(BaseUrl {
            host: host.to_string(),
            port,
            prefix: path.trim_end_matches('/').to_string(),
        })
    }

    /// `prefix + path`. A base URL ending in `/v1` (as servers print it) names the API
    /// root: `/v1/...` paths are not doubled and `/metrics`, `/health` go beside it.
    pub fn path(&self, path: &str) -> String {
        match self.prefix.strip_suffix("/v1") {
            Some(root) => format!("{root}{path}"),
            None => format!("{}{}", self.prefix, path),
        }
    }
}

/// Status and headers of a response.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An open response whose body is read incrementally.
pub struct Response {
    pub head: Head,
    stream: TcpStream,
    buf: Vec<u8>,
    mode: BodyMode,
    done: bool,
}

enum BodyMode {
    Chunked,
    Length(usize),
    UntilClose,
}

const MAX_HEAD: usize = 64 * 1024;

/// Sends one request and reads the response head.
pub async fn send(
    base: &BaseUrl,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<Response> {
    send_with(base, method, path, &[], body, timeout).await
}

/// [`send`] with extra request headers (`Authorization` for a server with an API key).
pub async fn send_with(
    base: &BaseUrl,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> Result<Response> {
    let mut stream =
        tokio::time::timeout(timeout, TcpStream::connect((base.host.as_str(), base.port)))
            .await
            .map_err(|_| {
                BenchError::msg(format!(
                    "connecting to {}:{} timed out",
                    base.host, base.port
                ))
            })?
            .map_err(BenchError::during(format!(
                "connecting to {}:{}",
                base.host, base.port
            )))?;
    stream.set_nodelay(true).ok();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let mut req = format!(
        "{method} {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\nAccept: */*\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
        base.path(path),
        base.host,
        base.port,
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    stream
        .write_all(&req)
        .await
        .map_err(BenchError::during("writing the request"))?;
    let mut buf = Vec::new();
    let split = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(BenchError::msg(format!(
                "response head exceeds {MAX_HEAD} bytes"
            )));
        }
        let mut tmp = [0u8; 8192];
        let n = tokio::time::timeout(timeout, stream.read(&mut tmp))
            .await
            .map_err(|_| BenchError::msg(format!("no response head within {timeout:?}")))??;
        if n == 0 {
            return Err(BenchError::msg(
                "connection closed before the response head",
            ));
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head_text = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head_text.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| BenchError::msg(format!("bad status line in {head_text:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let head = Head { status, headers };
    let mode = if head
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        BodyMode::Chunked
    } else if let Some(n) = head.header("content-length").and_then(|v| v.parse().ok()) {
        BodyMode::Length(n)
    } else {
        BodyMode::UntilClose
    };
    Ok(Response {
        head,
        stream,
        buf: buf[split + 4..].to_vec(),
        mode,
        done: false,
    })
}

impl Response {
    async fn fill(&mut self, timeout: Duration) -> Result<bool> {
        let mut tmp = [0u8; 16384];
        let n = tokio::time::timeout(timeout, self.stream.read(&mut tmp))
            .await
            .map_err(|_| BenchError::msg(format!("no bytes from the server for {timeout:?}")))??;
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n > 0)
    }

    /// The next piece of the decoded body and the instant it arrived; `None` at the end.
    pub async fn next_bytes(&mut self, timeout: Duration) -> Result<Option<(Vec<u8>, Instant)>> {
        if self.done {
            return Ok(None);
        }
        loop {
            match self.mode {
                BodyMode::Length(left) => {
                    if left == 0 {
                        self.done = true;
                        return Ok(None);
                    }
                    if !self.buf.is_empty() {
                        let take = left.min(self.buf.len());
                        let out: Vec<u8> = self.buf.drain(..take).collect();
                        self.mode = BodyMode::Length(left - take);
                        return Ok(Some((out, Instant::now())));
                    }
                    if !self.fill(timeout).await? {
                        return Err(BenchError::msg(format!(
                            "connection closed with {left} body bytes missing"
                        )));
                    }
                }
                BodyMode::UntilClose => {
                    if !self.buf.is_empty() {
                        return Ok(Some((std::mem::take(&mut self.buf), Instant::now())));
                    }
                    if !self.fill(timeout).await? {
                        self.done = true;
                        return Ok(None);
                    }
                }
                BodyMode::Chunked => {
                    if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                        let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                        let size_hex = line.split(';').next().unwrap_or("").trim();
                        let size = usize::from_str_radix(size_hex, 16).map_err(|_| {
                            BenchError::msg(format!("bad chunk size line {line:?}"))
                        })?;
                        if size == 0 {
                            self.done = true;
                            return Ok(None);
                        }
                        if self.buf.len() >= i + 2 + size + 2 {
                            let out = self.buf[i + 2..i + 2 + size].to_vec();
                            self.buf.drain(..i + 2 + size + 2);
                            return Ok(Some((out, Instant::now())));
                        }
                    }
                    if !self.fill(timeout).await? {
                        return Err(BenchError::msg("connection closed inside a chunked body"));
                    }
                }
            }
        }
    }

    /// The whole remaining body as text.
    pub async fn text(mut self, timeout: Duration) -> Result<String> {
        let mut all = Vec::new();
        while let Some((b, _)) = self.next_bytes(timeout).await? {
            all.extend_from_slice(&b);
        }
        Ok(String::from_utf8_lossy(&all).into_owned())
    }
}

/// Splits a byte stream into SSE events and yields the `data:` payload of each.
#[derive(Default)]
pub struct SseParser {
    pending: Vec<u8>,
}

impl SseParser {
    /// Feeds bytes; returns the data payloads of every event completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        loop {
            let lf = self.pending.windows(2).position(|w| w == b"\n\n");
            let crlf = self.pending.windows(4).position(|w| w == b"\r\n\r\n");
            let (end, sep) = match (lf, crlf) {
                (Some(a), Some(b)) if b < a => (b, 4),
                (Some(a), _) => (a, 2),
                (None, Some(b)) => (b, 4),
                (None, None) => break,
            };
            let event = String::from_utf8_lossy(&self.pending[..end]).into_owned();
            self.pending.drain(..end + sep);
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if !data.is_empty() {
                out.push(data.join("\n"));
            }
        }
        out
    }
}

/// GET `path` and return (status, body).
pub async fn get(base: &BaseUrl, path: &str, timeout: Duration) -> Result<(u16, String)> {
    let r = send(base, "GET", path, b"", timeout).await?;
    let status = r.head.status;
    Ok((status, r.text(timeout).await?))
}
