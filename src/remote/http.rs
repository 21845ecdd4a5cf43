//! HTTP to the server with retries: exponential backoff with jitter on 429, 5xx, timeouts
//! and connection errors (a `Retry-After` header in seconds wins over the backoff); any
//! other 4xx fails at once with the server's `error.message`.

use anyhow::{Context, Result};
use rand::Rng;
use std::time::Duration;

/// Longest `Retry-After` honoured (a larger one is cut to this).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);
/// Connect timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// When and how often a failed call is tried again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Tries after the first one.
    pub max_retries: usize,
    /// Wait before the first retry (doubled for each further one, then jittered).
    pub base: Duration,
    /// Longest computed wait.
    pub cap: Duration,
}

impl RetryPolicy {
    /// The wait before retry number `attempt` (0-based): `base·2^attempt` capped at `cap`,
    /// times a random factor in [0.5, 1] so that clients retrying together spread out.
    fn backoff(&self, attempt: usize) -> Duration {
        let exp = self.base.as_secs_f64() * 2f64.powi(attempt.min(30) as i32);
        let jitter = rand::rng().random_range(0.5..=1.0);
        Duration::from_secs_f64(exp.min(self.cap.as_secs_f64()) * jitter)
    }
}

/// A non-success HTTP status with the server's message (what the CLI shows).
#[derive(Debug, thiserror::Error)]
#[error("server answered HTTP {status}: {message}")]
pub struct StatusError {
    /// The HTTP status.
    pub status: u16,
    /// `error.message` from the body, or the body itself.
    pub message: String,
}

/// Why one try failed.
enum Failure {
    /// Worth another try, after `wait` when the server said so.
    Transient {
        error: anyhow::Error,
        wait: Option<Duration>,
    },
    /// Trying again would not help.
    Fatal(anyhow::Error),
}

/// A blocking client for one server base URL.
pub(super) struct Client {
    agent: ureq::Agent,
    base: String,
    key: Option<String>,
    policy: RetryPolicy,
}

impl Client {
    /// A client for `base_url` (with or without a trailing slash) whose calls time out
    /// after `timeout` in all.
    pub(super) fn new(
        base_url: &str,
        key: Option<String>,
        timeout: Duration,
        policy: RetryPolicy,
    ) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(CONNECT_TIMEOUT)
            .timeout(timeout)
            .build();
        Self {
            agent,
            base: base_url.trim_end_matches('/').to_string(),
            key,
            policy,
        }
    }

    /// The base URL without a trailing slash.
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    /// `GET {base}/{path}`: the body of a 2xx answer.
    pub(super) fn get(&self, path: &str) -> Result<String> {
        let url = self.url(path);
        self.with_retries(&format!("GET {url}"), || {
            self.authorized(self.agent.get(&url))
                .call()
                .map_err(Box::new)
        })
    }

    /// `POST {base}/{path}` with a JSON body: the body of a 2xx answer.
    pub(super) fn post_json(&self, path: &str, body: &str) -> Result<String> {
        let url = self.url(path);
        self.with_retries(&format!("POST {url}"), || {
            self.authorized(self.agent.post(&url))
                .set("Content-Type", "application/json")
                .send_string(body)
                .map_err(Box::new)
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base, path.trim_start_matches('/'))
    }

    fn authorized(&self, req: ureq::Request) -> ureq::Request {
        match &self.key {
            Some(k) => req.set("Authorization", &format!("Bearer {k}")),
            None => req,
        }
    }

    /// Run `send` until it succeeds, fails for good, or the retries are spent.
    fn with_retries(
        &self,
        what: &str,
        send: impl Fn() -> Result<ureq::Response, Box<ureq::Error>>,
    ) -> Result<String> {
        let mut attempt = 0;
        loop {
            match classify(send()) {
                Ok(body) => return Ok(body),
                Err(Failure::Fatal(e)) => return Err(e.context(what.to_string())),
                Err(Failure::Transient { error, .. }) if attempt >= self.policy.max_retries => {
                    if attempt == 0 {
                        return Err(error.context(what.to_string()));
                    }
                    return Err(error.context(format!(
                        "{what}: gave up after {attempt} retr{}",
                        if attempt == 1 { "y" } else { "ies" }
                    )));
                }
                Err(Failure::Transient { wait, .. }) => {
                    std::thread::sleep(wait.unwrap_or_else(|| self.policy.backoff(attempt)));
                    attempt += 1;
                }
            }
        }
    }
}

/// The body of a successful answer, or why the try failed and whether to try again.
fn classify(result: Result<ureq::Response, Box<ureq::Error>>) -> Result<String, Failure> {
    match result.map_err(|e| *e) {
        Ok(resp) => resp
            .into_string()
            .context("cannot read the server's answer")
            .map_err(|error| Failure::Transient { error, wait: None }),
        Err(ureq::Error::Status(status, resp)) => {
            let wait = retry_after(&resp);
            let error = StatusError {
                status,
                message: error_message(resp.into_string().unwrap_or_default()),
            };
            if status == 429 || status >= 500 {
                Err(Failure::Transient {
                    error: error.into(),
                    wait,
                })
            } else {
                Err(Failure::Fatal(error.into()))
            }
        }
        Err(ureq::Error::Transport(t)) => {
            use ureq::ErrorKind::*;
            let retry = matches!(t.kind(), ConnectionFailed | Io | Dns | ProxyConnect);
            let error = anyhow::Error::new(t).context("cannot reach the server");
            Err(if retry {
                Failure::Transient { error, wait: None }
            } else {
                Failure::Fatal(error)
            })
        }
    }
}

/// `Retry-After` in (possibly fractional) seconds; an HTTP date is left to the backoff.
fn retry_after(resp: &ureq::Response) -> Option<Duration> {
    let secs: f64 = resp.header("Retry-After")?.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs).min(MAX_RETRY_AFTER))
}

/// `error.message` of an OpenAI-style error body (or `error` as a string), else the body.
fn error_message(body: String) -> String {
    let v: Option<serde_json::Value> = serde_json::from_str(&body).ok();
    let msg = v.as_ref().and_then(|v| {
        let e = v.get("error")?;
        e.get("message")
            .and_then(|m| m.as_str())
            .or_else(|| e.as_str())
            .map(str::to_string)
    });
    msg.unwrap_or_else(|| {
        let body = body.trim();
        if body.is_empty() {
            "(empty body)".to_string()
        } else {
            body.chars().take(500).collect()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let p = RetryPolicy {
            max_retries: 5,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
        };
        for (attempt, full) in [(0, 0.5), (1, 1.0), (3, 4.0), (10, 30.0)] {
            let d = p.backoff(attempt).as_secs_f64();
            assert!(d >= full / 2.0 - 1e-9 && d <= full + 1e-9, "{attempt}: {d}");
        }
    }

    #[test]
    fn error_messages_come_from_the_body() {
        let m = error_message(r#"{"error": {"message": "model x not found", "code": 400}}"#.into());
        assert_eq!(m, "model x not found");
        assert_eq!(error_message(r#"{"error": "bad key"}"#.into()), "bad key");
        assert_eq!(error_message("plain text".into()), "plain text");
        assert_eq!(error_message(String::new()), "(empty body)");
    }
}
