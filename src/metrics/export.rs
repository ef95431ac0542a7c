//! Where the metrics go: a localhost HTTP listener (`GET /metrics`) and a node_exporter
//! textfile, each opt-in. What is read from the host is rendered again after the core's
//! events and when a scrape finds it over a second old, at most one rendering at a time; a
//! scrape waits for a new one [`SCRAPE_WAIT`] at most, else it gets the previous one. Each
//! connection has [`HEAD_TIMEOUT`] to send its request, and a flood of connections that send
//! nothing evicts its own oldest, never queueing a scrape behind them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::safe_write::TrustedDir;
use crate::engine::Engine;

/// Longest request head read.
const MAX_REQUEST: usize = 8192;
/// How long a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a client has to take the answer.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once; one more evicts the oldest that has not sent its request yet.
const CONNECTIONS: usize = 64;
/// How long a rendering of the host is reused when no event came since.
const FRESH: Duration = Duration::from_secs(1);
/// The longest a scrape waits for a new rendering of the host when there is an older one.
pub const SCRAPE_WAIT: Duration = Duration::from_secs(2);

/// A rendering of the host and when it was made.
type Rendering = Option<(Instant, Arc<String>)>;

/// Renders the metrics: the counters at each call, the host's part again only when it is
/// over a second old or an event changed it, one rendering at a time.
#[derive(Clone)]
pub struct Renderer(Arc<Inner>);

struct Inner {
    engine: Arc<Engine>,
    host: watch::Sender<Rendering>,
    /// A rendering of the host runs.
    rendering: AtomicBool,
    /// An event came since the last rendering of the host began.
    stale: AtomicBool,
}

/// Clears a flag when dropped.
struct Clear<'a>(&'a AtomicBool);

impl Drop for Clear<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Renderer {
    /// A renderer of the engine's metrics. An event of the engine marks the host's part
    /// stale; the next scrape renders it again (nothing is rendered while nobody scrapes,
    /// so a storm of changes costs no look at the host). Call it within the runtime.
    pub fn new(engine: Arc<Engine>) -> Self {
        let this = Renderer(Arc::new(Inner {
            engine,
            host: watch::Sender::new(None),
            rendering: AtomicBool::new(false),
            stale: AtomicBool::new(true),
        }));
        let woken = Arc::new(tokio::sync::Notify::new());
        let wake = woken.clone();
        let events = this.0.engine.events().subscribe(move || wake.notify_one());
        let follower = this.0.clone();
        tokio::spawn(async move {
            loop {
                woken.notified().await;
                // Which change does not matter: the host's part is rendered again.
                drop(events.drain());
                follower.stale.store(true, Ordering::Release);
            }
        });
        this
    }

    /// Starts a rendering of the host on the blocking pool, unless one runs.
    fn refresh(&self) {
        if self.0.rendering.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let _done = Clear(&inner.rendering);
            inner.stale.store(false, Ordering::Release);
            let text = Arc::new(super::render_host(&inner.engine));
            inner.host.send_replace(Some((Instant::now(), text)));
        });
    }

    /// The host's part: the last rendering if it is fresh, else a new one, waited for at
    /// most `wait` (`None`: as long as it takes) when there is an older one to give.
    async fn host(&self, wait: Option<Duration>) -> Arc<String> {
        let mut rx = self.0.host.subscribe();
        let last = rx.borrow_and_update().clone();
        if let Some((at, text)) = &last {
            if at.elapsed() < FRESH && !self.0.stale.load(Ordering::Acquire) {
                return text.clone();
            }
        }
        self.refresh();
        match (wait, &last) {
            (Some(wait), Some(_)) => {
                let _ = tokio::time::timeout(wait, rx.changed()).await;
            }
            _ => {
                let _ = rx.changed().await;
            }
        }
        let now = rx.borrow().as_ref().map(|(_, text)| text.clone());
        now.unwrap_or_default()
    }

    /// Every metric: the counters now and the host's part (see [`Renderer::host`]).
    pub async fn render(&self, wait: Option<Duration>) -> String {
        let host = self.host(wait).await;
        let mut text = super::render_counters();
        text.push_str(&host);
        text
    }
}

/// Whether an address is the loopback: the listener serves this host only.
pub fn is_local(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// A connection being served.
struct Connection {
    task: tokio::task::AbortHandle,
    /// It has not sent its whole request yet.
    reading: Arc<AtomicBool>,
}

/// Serves `GET /metrics` on `listener` until the runtime ends. Every connection is served
/// on its own task; beyond [`CONNECTIONS`], a new one evicts the oldest that is still
/// sending its request, or is closed when all are being answered.
pub async fn serve(listener: tokio::net::TcpListener, renderer: Renderer) {
    let mut open: VecDeque<Connection> = VecDeque::with_capacity(CONNECTIONS);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("metrics listener: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        open.retain(|c| !c.task.is_finished());
        if open.len() >= CONNECTIONS {
            match open.iter().position(|c| c.reading.load(Ordering::Acquire)) {
                Some(oldest) => {
                    if let Some(c) = open.remove(oldest) {
                        c.task.abort();
                    }
                }
                None => {
                    tracing::debug!("metrics listener: {CONNECTIONS} answers running, one refused");
                    continue;
                }
            }
        }
        let reading = Arc::new(AtomicBool::new(true));
        let renderer = renderer.clone();
        let flag = reading.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = answer(stream, &renderer, &flag).await {
                tracing::debug!("metrics request: {e}");
            }
        });
        open.push_back(Connection {
            task: task.abort_handle(),
            reading,
        });
    }
}

async fn answer(
    mut stream: tokio::net::TcpStream,
    renderer: &Renderer,
    reading: &AtomicBool,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read = tokio::time::timeout(HEAD_TIMEOUT, async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            if head.len() >= MAX_REQUEST {
                return Err(std::io::Error::other("request head too large"));
            }
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok(())
    })
    .await;
    reading.store(false, Ordering::Release);
    let (status, content_type, body): (&str, &str, String) = match read {
        Err(_) => return Ok(()),
        Ok(Err(_)) => (
            "431 Request Header Fields Too Large",
            "text/plain",
            String::new(),
        ),
        Ok(Ok(())) => {
            let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            let mut parts = line.split_whitespace();
            match (parts.next(), parts.next()) {
                (Some("GET"), Some("/metrics")) => (
                    "200 OK",
                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                    renderer.render(Some(SCRAPE_WAIT)).await,
                ),
                (Some("GET"), Some(_)) => (
                    "404 Not Found",
                    "text/plain",
                    "vgpud serves /metrics\n".to_string(),
                ),
                _ => ("405 Method Not Allowed", "text/plain", String::new()),
            }
        }
    };
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(header.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    })
    .await
    .map_err(|_| std::io::Error::other("the client did not take the answer in time"))?
}

/// Writes the metrics to `path` every `every` (a new file renamed into place, so node_exporter
/// never reads half a file) until the runtime ends. A directory that another user could write,
/// or that neither root nor vgpud owns, is refused (see [`TrustedDir`]); each new problem is
/// logged once, and the listener goes on.
pub async fn write_textfile(path: PathBuf, every: Duration, renderer: Renderer) {
    let mut said: Option<String> = None;
    loop {
        let text = renderer.render(None).await;
        let target = path.clone();
        let written = tokio::task::spawn_blocking(move || write_textfile_once(&target, &text))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        match written {
            Ok(()) => {
                if said.take().is_some() {
                    tracing::info!(path = %path.display(), "metrics textfile written again");
                }
            }
            Err(e) if said.as_deref() != Some(e.as_str()) => {
                tracing::warn!(path = %path.display(), "not writing the metrics textfile: {e}");
                said = Some(e);
            }
            Err(_) => {}
        }
        tokio::time::sleep(every).await;
    }
}

fn write_textfile_once(path: &std::path::Path, text: &str) -> Result<(), String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("the textfile path has no file name")?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    // 0644: node_exporter, another user, reads it.
    TrustedDir::open(dir)
        .and_then(|d| d.replace(name, text.as_bytes(), 0o644))
        .map_err(|e| e.to_string())
}
