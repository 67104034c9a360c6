//! A real OpenID Connect provider for the auth tests: npm `oidc-provider` run by
//! `tests/oidc/idp.mjs` (installed by `.ci/run` with `npm ci --prefix tests/oidc`). It issues
//! client-credentials JWT access tokens for the audience (`resource`) a test asks for; the
//! clients and the test-only routes are described in the script.

use std::{process::Stdio, time::Duration};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

use super::{
    prereq::{node, repo_root, skip},
    wait::within,
};

pub struct TestIdp {
    /// `http://127.0.0.1:PORT`, the `iss` of its tokens.
    pub issuer: String,
    pub token_endpoint: String,
    child: Child,
    http: reqwest::Client,
}

impl TestIdp {
    /// Start the provider, or `None` (after saying why; a failure under
    /// `BRIDGE_TEST_STRICT=1`) when node or the script's packages are missing.
    pub async fn start(test: &str) -> Option<Self> {
        let dir = repo_root().join("tests/oidc");
        let Some(node) = node() else {
            return skip(test, "node is not installed");
        };
        if !dir.join("node_modules/oidc-provider").exists() {
            return skip(
                test,
                "tests/oidc has no node_modules: run `npm ci --prefix tests/oidc`",
            );
        }
        let mut child = Command::new(node)
            .arg(dir.join("idp.mjs"))
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start node tests/oidc/idp.mjs");
        let stdout = child.stdout.take().expect("the IdP's stdout");
        let line = within("the IdP says where it listens", async {
            BufReader::new(stdout).lines().next_line().await
        })
        .await
        .expect("read the IdP's stdout")
        .expect("the IdP printed its address");
        let started: Value = serde_json::from_str(&line).expect("the IdP's JSON line");
        Some(Self {
            issuer: started["issuer"].as_str().expect("issuer").into(),
            token_endpoint: started["token_endpoint"]
                .as_str()
                .expect("token_endpoint")
                .into(),
            child,
            http: reqwest::Client::new(),
        })
    }

    /// A client-credentials access token of `client` for `resource` (its `aud`).
    pub async fn token(&self, client: &str, resource: &str) -> String {
        let response = within(
            "a token from the IdP",
            self.http
                .post(&self.token_endpoint)
                .basic_auth(client, Some(format!("{client}-secret")))
                .form(&[("grant_type", "client_credentials"), ("resource", resource)])
                .send(),
        )
        .await
        .expect("POST /token");
        let status = response.status();
        let body: Value = response.json().await.expect("the token response");
        assert!(status.is_success(), "the IdP refused a token: {body}");
        body["access_token"]
            .as_str()
            .expect("access_token")
            .to_string()
    }

    /// A token the provider would not mint (claims and header chosen by the test), signed
    /// with its current key.
    pub async fn sign(&self, claims: Value, header: Value) -> String {
        let body = self
            .test_route("/_test/sign", json!({ "claims": claims, "header": header }))
            .await;
        body["token"].as_str().expect("a signed token").to_string()
    }

    /// Rotate the signing key; returns the new `kid`.
    pub async fn rotate(&self) -> String {
        let body = self.test_route("/_test/rotate", json!({})).await;
        body["kid"].as_str().expect("the new kid").to_string()
    }

    /// How often the JWKS has been fetched.
    pub async fn jwks_requests(&self) -> u64 {
        let url = format!("{}/_test/stats", self.issuer);
        let body: Value = within("IdP stats", async {
            self.http.get(&url).send().await?.json().await
        })
        .await
        .expect("IdP stats");
        body["jwks_requests"].as_u64().expect("a count")
    }

    async fn test_route(&self, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.issuer);
        within(path, async {
            self.http.post(&url).json(&body).send().await?.json().await
        })
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// Stop the provider and wait until it is gone (its port then refuses connections).
    pub async fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}
