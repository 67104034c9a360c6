//! What a running bridge takes from its re-read config (SIGHUP): who may call it, i.e.
//! `auth.mcp_tokens`, `auth.admin` and `auth.policies`. Everything else is read at start
//! only; a reload names the keys whose change waits for a restart.

use std::fmt::Debug;

use super::Config;

impl Config {
    /// This running config with `next`'s reloadable keys.
    pub fn reloaded(&self, next: &Config) -> Config {
        let mut applied = self.clone();
        applied.auth.mcp_tokens = next.auth.mcp_tokens.clone();
        applied.auth.admin = next.auth.admin.clone();
        applied.auth.policies = next.auth.policies.clone();
        applied
    }

    /// The keys (or sections) `next` changes that a reload does not apply. Compared by their
    /// `Debug` form, where a secret shows where it comes from, not its value: a literal secret
    /// changed in place is not seen (an `env:`/`file:` one is re-read only at start).
    pub fn kept_until_restart(&self, next: &Config) -> Vec<&'static str> {
        fn differs(a: &impl Debug, b: &impl Debug) -> bool {
            format!("{a:?}") != format!("{b:?}")
        }
        let (a, b) = (&self.auth, &next.auth);
        [
            ("server", differs(&self.server, &next.server)),
            ("jobs", differs(&self.jobs, &next.jobs)),
            ("store", differs(&self.store, &next.store)),
            ("upstreams", differs(&self.upstreams, &next.upstreams)),
            ("limits", differs(&self.limits, &next.limits)),
            (
                "upstream_tasks",
                differs(&self.upstream_tasks, &next.upstream_tasks),
            ),
            ("auth.issuers", differs(&a.issuers, &b.issuers)),
            ("auth.jwt", differs(&a.jwt, &b.jwt)),
            ("auth.resource", differs(&a.resource, &b.resource)),
            (
                "auth.scopes_supported",
                differs(&a.scopes_supported, &b.scopes_supported),
            ),
            (
                "auth.authorization_servers",
                differs(&a.authorization_servers, &b.authorization_servers),
            ),
            ("auth.allow_open", a.allow_open != b.allow_open),
            ("auth.job_secret", differs(&a.job_secret, &b.job_secret)),
            (
                "auth.job_token_ttl_secs",
                a.job_token_ttl_secs != b.job_token_ttl_secs,
            ),
            (
                "auth.require_job_tokens",
                a.require_job_tokens != b.require_job_tokens,
            ),
        ]
        .into_iter()
        .filter_map(|(key, changed)| changed.then_some(key))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{Config, Overrides};

    fn config(text: &str) -> Config {
        Config::from_toml(text, Path::new("reload.toml"), &Overrides::default()).unwrap()
    }

    const TOKENS: &str =
        "[auth]\nmcp_tokens = [{ name = \"a\", token = \"a-token-0123456789abcdef\" }]\n";

    #[test]
    fn a_reload_takes_the_callers_and_names_what_waits_for_a_restart() {
        let running = config(TOKENS);
        let next = config(
            "[auth]\nmcp_tokens = [{ name = \"b\", token = \"b-token-0123456789abcdef\" }]\n\
             require_job_tokens = false\n[limits]\nmax_sessions = 100\n",
        );
        let applied = running.reloaded(&next);
        assert_eq!(applied.auth.mcp_tokens[0].name, "b");
        assert!(
            applied.auth.require_job_tokens,
            "only the callers are taken"
        );
        assert_eq!(
            running.kept_until_restart(&next),
            ["limits", "auth.require_job_tokens"]
        );
        assert!(running.kept_until_restart(&config(TOKENS)).is_empty());
    }
}
