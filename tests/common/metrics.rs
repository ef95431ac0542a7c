//! vgpud's Prometheus metrics listener, as the tests reach it.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use super::setup::Setup;

/// The metrics listener's address, from vgpud's log (it binds port 0).
pub fn listener(s: &Setup) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = s.daemon.log_text();
        if let Some(rest) = log.split("serving metrics at http://").nth(1) {
            return rest.split('/').next().unwrap_or_default().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no metrics listener in the log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A raw HTTP request; the status line and the body.
pub fn http(addr: &str, request: &[u8]) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the metrics listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

/// The value of one sample (`name{labels}` exactly as vgpud renders it), 0 when absent.
pub fn sample(addr: &str, series: &str) -> f64 {
    let (_, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}
