//! Tests of what a running bridge takes from its re-read config (SIGHUP):
//! `Config::reloaded` and `Config::kept_until_restart` (config/mod.rs).

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
