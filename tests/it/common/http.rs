//! Plain HTTP against the bridge's REST endpoints: JSON in and out, the metrics text, and a
//! request line sent byte for byte (for paths an HTTP client would normalise away).

use serde_json::Value;

use super::wait::within;

/// GET a URL and return the status and JSON body.
pub async fn get_json(url: &str) -> (u16, Value) {
    let response = within("GET", reqwest::get(url)).await.expect("GET");
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// The status of a GET, or `None` while nothing answers (a server still starting, or gone).
pub async fn status_of(url: &str) -> Option<u16> {
    reqwest::get(url).await.ok().map(|r| r.status().as_u16())
}

/// POST to a URL (no body) and return the status and JSON body.
pub async fn post_json(url: &str) -> (u16, Value) {
    let response = within("POST", reqwest::Client::new().post(url).send())
        .await
        .expect("POST");
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// The Prometheus text of `{base}/metrics` (open: no bearer token configured).
pub async fn metrics_text(base: &str) -> String {
    let response = within("GET /metrics", reqwest::get(format!("{base}/metrics")))
        .await
        .expect("GET /metrics");
    within("the metrics text", response.text())
        .await
        .expect("the metrics text")
}

/// The value of the series written exactly `series` (`name{label="value",...}`, as the
/// bridge writes it) in the Prometheus text `metrics`; `None` when there is no such series.
pub fn series_value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Send `request_target` as the raw request line's target (no normalisation on the way) and
/// return the status code.
pub async fn raw_http_status(addr: std::net::SocketAddr, method: &str, target: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = within("connect", tokio::net::TcpStream::connect(addr))
        .await
        .expect("connect");
    let request =
        format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    within("raw response", async {
        while !head.windows(2).any(|w| w == b"\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {line:?}"))
}
