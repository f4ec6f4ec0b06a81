//! The Hub's HTTP endpoints folio uses: the file tree of a repository and `resolve/main/FILE`
//! (metadata by `HEAD`, content by `GET` with a `Range`), `$HF_TOKEN` as a bearer token,
//! `$HF_ENDPOINT` (default `https://huggingface.co`) as the base.

use crate::error::{failed, FetchError};
use std::time::Duration;

/// `$HF_ENDPOINT` without a trailing `/`, or `https://huggingface.co`.
pub fn endpoint() -> String {
    std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.trim().is_empty())
        .map(|e| e.trim().trim_end_matches('/').to_string())
        .unwrap_or_else(|| "https://huggingface.co".to_string())
}

fn token() -> Option<String> {
    std::env::var("HF_TOKEN")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// Why a request failed: the Hub answered with an error status, or could not be reached.
pub enum Failure {
    Status(u16, String),
    Unreachable(String),
}

pub struct Client {
    base: String,
    agent: ureq::Agent,
    head_agent: ureq::Agent,
}

/// What `HEAD resolve/main/FILE` says about a file.
#[derive(Debug, Clone)]
pub struct FileMeta {
    pub commit: String,
    pub etag: String,
    pub size: Option<u64>,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    pub fn new() -> Self {
        let build = |redirects| {
            ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(10))
                .timeout_read(Duration::from_secs(60))
                .redirects(redirects)
                .user_agent(concat!("folio/", env!("CARGO_PKG_VERSION"), "; hf_hub"))
                .build()
        };
        Client {
            base: endpoint(),
            agent: build(5),
            head_agent: build(0),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn auth(req: ureq::Request) -> ureq::Request {
        match token() {
            Some(t) => req.set("Authorization", &format!("Bearer {t}")),
            None => req,
        }
    }

    fn call(req: ureq::Request) -> std::result::Result<ureq::Response, Failure> {
        match Self::auth(req).call() {
            Ok(r) => Ok(r),
            Err(ureq::Error::Status(code, r)) => {
                Err(Failure::Status(code, r.into_string().unwrap_or_default()))
            }
            Err(e) => Err(Failure::Unreachable(e.to_string())),
        }
    }

    /// The paths of the repository's files (`/api/models/REPO/tree/main?recursive=1`).
    pub fn list(&self, repo: &str) -> std::result::Result<Vec<String>, Failure> {
        let url = format!("{}/api/models/{repo}/tree/main?recursive=1", self.base);
        let r = Self::call(self.agent.get(&url))?;
        let body = r
            .into_string()
            .map_err(|e| Failure::Unreachable(format!("reading {url}: {e}")))?;
        let v: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| Failure::Unreachable(format!("{url} answered no JSON: {e}")))?;
        let items = v.as_array().cloned().unwrap_or_default();
        Ok(items
            .iter()
            .filter(|i| i.get("type").and_then(|t| t.as_str()) != Some("directory"))
            .filter_map(|i| i.get("path").and_then(|p| p.as_str()).map(String::from))
            .collect())
    }

    pub fn file_url(&self, repo: &str, file: &str) -> String {
        format!("{}/{repo}/resolve/main/{file}", self.base)
    }

    /// `HEAD resolve/main/FILE`, redirects not followed (the Hub's `X-Linked-Etag` is on
    /// the redirect).
    pub fn head(&self, repo: &str, file: &str) -> std::result::Result<FileMeta, Failure> {
        let url = self.file_url(repo, file);
        let r = Self::call(
            self.head_agent
                .head(&url)
                .set("Accept-Encoding", "identity"),
        )?;
        let h = |n: &str| r.header(n).map(|v| v.trim().to_string());
        let etag = h("X-Linked-Etag")
            .or_else(|| h("ETag"))
            .map(|e| e.trim_start_matches("W/").trim_matches('"').to_string())
            .filter(|e| !e.is_empty());
        let commit = h("X-Repo-Commit").filter(|c| !c.is_empty());
        let size = h("X-Linked-Size")
            .or_else(|| h("Content-Length"))
            .and_then(|s| s.parse().ok());
        match (etag, commit) {
            (Some(etag), Some(commit)) => Ok(FileMeta { commit, etag, size }),
            _ => Err(Failure::Unreachable(format!(
                "{url} answered without an ETag and X-Repo-Commit (is {} a Hugging Face Hub?)",
                self.base
            ))),
        }
    }

    /// `GET resolve/main/FILE` from byte `from` on; whether the answer is partial (206).
    pub fn get(
        &self,
        repo: &str,
        file: &str,
        from: u64,
    ) -> std::result::Result<(ureq::Response, bool), Failure> {
        let url = self.file_url(repo, file);
        let mut req = self.agent.get(&url).set("Accept-Encoding", "identity");
        if from > 0 {
            req = req.set("Range", &format!("bytes={from}-"));
        }
        let r = Self::call(req)?;
        let partial = r.status() == 206;
        Ok((r, partial))
    }
}

/// The error for a failed request about `hf:REPO`.
pub fn error(repo: &str, base: &str, what: &str, f: Failure) -> FetchError {
    match f {
        Failure::Status(401 | 403, _) => failed!(
            "hf:{repo}: {base} refused access ({what}): the repository is gated or private; accept its terms on the Hub and set HF_TOKEN to a token that may read it{}",
            if token().is_some() { " (HF_TOKEN is set but was refused)" } else { " (HF_TOKEN is not set)" }
        ),
        Failure::Status(404, _) => failed!(
            "hf:{repo}: not found on {base} ({what}): check the repository and file names (a private repository also answers 404 without HF_TOKEN)"
        ),
        Failure::Status(code, body) => failed!(
            "hf:{repo}: {base} answered {code} ({what}): {}",
            body.chars().take(200).collect::<String>()
        ),
        Failure::Unreachable(e) => failed!(
            "hf:{repo}: cannot reach {base} ({what}): {e}; set HF_ENDPOINT for a mirror, or HF_HUB_OFFLINE=1 to use cached files only"
        ),
    }
}
