//! A `quire serve` child process for tests, and raw HTTP/1.1 requests to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `quire serve` on a free loopback port; killed when dropped.
pub struct Server {
    /// The server process.
    pub child: Child,
    /// Its port.
    pub port: u16,
}

impl Server {
    /// Start the server with `args` after the model and wait until it listens.
    pub fn start(args: &[&str]) -> Self {
        let model = super::model_path(super::QWEN);
        let cache = tempfile::tempdir().unwrap().keep();
        let mut child = Command::new(env!("CARGO_BIN_EXE_quire"))
            .args(["serve", "--port", "0", "--model"])
            .arg(&model)
            .arg("--prefix-cache-dir")
            .arg(&cache)
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("quire serve starts");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("quire serve printed its address")
                .unwrap();
            if let Some(rest) = line.split("http://127.0.0.1:").nth(1) {
                break rest.split('/').next().unwrap().parse().unwrap();
            }
        };
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, port }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn post(&self, path: &str, headers: &str, body: &str) -> (u16, String) {
        post(self.port, path, headers, body)
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        request(
            self.port,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    }
}

/// One HTTP/1.1 request on its own connection: (status, body).
pub fn request(port: u16, raw: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

/// A POST with a JSON body.
pub fn post(port: u16, path: &str, headers: &str, body: &str) -> (u16, String) {
    let raw = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    request(port, raw.as_bytes())
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
