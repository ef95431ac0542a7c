//! Where the metrics go: a localhost HTTP listener (`GET /metrics`) and a node_exporter
//! textfile, each opt-in. A scrape renders at most once a second (a burst of scrapes costs
//! one look at the host); requests are bounded in size and time.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::engine::Engine;

/// Longest request head read.
const MAX_REQUEST: usize = 8192;
/// How long a client has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once.
const CONNECTIONS: usize = 16;
/// How long a rendering is reused.
const FRESH: Duration = Duration::from_secs(1);

/// A rendering and when it was made.
type Rendering = Option<(Instant, Arc<String>)>;

/// Renders the metrics, reusing one made less than a second ago.
#[derive(Clone)]
pub struct Renderer {
    engine: Arc<Engine>,
    last: Arc<Mutex<Rendering>>,
}

impl Renderer {
    /// A renderer of the engine's metrics.
    pub fn new(engine: Arc<Engine>) -> Self {
        Renderer {
            engine,
            last: Arc::new(Mutex::new(None)),
        }
    }

    /// The metrics now (on the blocking pool: rendering reads the host).
    pub async fn render(&self) -> Arc<String> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut last = this.last.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, text)) = last.as_ref() {
                if at.elapsed() < FRESH {
                    return text.clone();
                }
            }
            let text = Arc::new(super::render(&this.engine));
            *last = Some((Instant::now(), text.clone()));
            text
        })
        .await
        .unwrap_or_default()
    }
}

/// Whether an address is the loopback: the listener serves this host only.
pub fn is_local(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Serves `GET /metrics` on `listener` until the runtime ends.
pub async fn serve(listener: tokio::net::TcpListener, renderer: Renderer) {
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("metrics listener: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let renderer = renderer.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = answer(stream, &renderer).await {
                tracing::debug!("metrics request: {e}");
            }
        });
    }
}

async fn answer(mut stream: tokio::net::TcpStream, renderer: &Renderer) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read = tokio::time::timeout(REQUEST_TIMEOUT, async {
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
    let (status, content_type, body): (&str, &str, Arc<String>) = match read {
        Err(_) => return Ok(()),
        Ok(Err(_)) => (
            "431 Request Header Fields Too Large",
            "text/plain",
            Arc::default(),
        ),
        Ok(Ok(())) => {
            let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            let mut parts = line.split_whitespace();
            match (parts.next(), parts.next()) {
                (Some("GET"), Some("/metrics")) => (
                    "200 OK",
                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                    renderer.render().await,
                ),
                (Some("GET"), Some(_)) => (
                    "404 Not Found",
                    "text/plain",
                    Arc::new("vgpud serves /metrics\n".to_string()),
                ),
                _ => ("405 Method Not Allowed", "text/plain", Arc::default()),
            }
        }
    };
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(header.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// Writes the metrics to `path` every `every` (through a temporary file and a rename, so
/// node_exporter never reads half a file) until the runtime ends.
pub async fn write_textfile(path: PathBuf, every: Duration, renderer: Renderer) {
    loop {
        let text = renderer.render().await;
        let target = path.clone();
        let written = tokio::task::spawn_blocking(move || write_atomically(&target, &text)).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(path = %path.display(), "writing the metrics textfile: {e}")
            }
            Err(e) => tracing::warn!("writing the metrics textfile: {e}"),
        }
        tokio::time::sleep(every).await;
    }
}

fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the textfile path has no directory"))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| std::io::Error::other("the textfile path has no file name"))?;
    // node_exporter reads only `*.prom`: the temporary name is not one.
    let tmp = dir.join(format!(".{name}.vgpud-tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
