//! `[auth.admin]` and `[[auth.policies]]`: who sees every job, and which upstream tools each
//! caller may list and call. Both name callers the same way ([`Callers`]).

use serde::Deserialize;

use super::ConfigError;

/// Which callers an entry applies to: any of the lists matching is enough.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Callers {
    /// Names of static tokens (`auth.mcp_tokens` entries; plain ones are `token-1`, …).
    pub tokens: Vec<String>,
    /// JWT subjects (the issuer's `subject_claim`: `sub`, or `oid` for Entra ID).
    pub subjects: Vec<String>,
    /// Values of the issuer's `role_claims` (Entra ID app roles in `roles`, group IDs in
    /// `groups`).
    pub roles: Vec<String>,
    /// OAuth scopes in the token's `scp` or `scope` claim.
    pub scopes: Vec<String>,
    /// JWT matches (`subjects`, `roles`, `scopes`) count only for tokens of this issuer; unset:
    /// of the one configured issuer (with more than one, it must be set).
    pub issuer: Option<String>,
}

impl Callers {
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
            && self.subjects.is_empty()
            && self.roles.is_empty()
            && self.scopes.is_empty()
    }
}

/// One `[[auth.policies]]` entry: the callers it matches may list and call the upstream tools
/// whose names (`<upstream>__<tool>`) match one of `tools`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Every authenticated caller (instead of naming them).
    #[serde(default)]
    pub everyone: bool,
    #[serde(default)]
    pub tokens: Vec<String>,
    #[serde(default)]
    pub subjects: Vec<String>,
    #[serde(default)]
    pub roles: Vec<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    pub issuer: Option<String>,
    /// Glob patterns of tool names: `*` any run of characters, `?` one, `[ab]` a class.
    pub tools: Vec<String>,
}

impl PolicyConfig {
    pub fn callers(&self) -> Callers {
        Callers {
            tokens: self.tokens.clone(),
            subjects: self.subjects.clone(),
            roles: self.roles.clone(),
            scopes: self.scopes.clone(),
            issuer: self.issuer.clone(),
        }
    }
}

/// A tool-name glob as the policies use it (no path separators in tool names, so `*` crosses
/// everything).
pub fn tool_glob(pattern: &str) -> Result<globset::Glob, globset::Error> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
}

/// One rule over a config entry: the field it names (`""`: the entry itself) and, when the entry
/// breaks it, what to do.
type Rule = (&'static str, Option<String>);

/// `[auth.admin]` and `[[auth.policies]]`: the first rule an entry breaks is the error.
pub(super) fn validate(
    admin: &Callers,
    policies: &[PolicyConfig],
    token_names: &[String],
    issuers: &[&str],
    err: &impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let admin = caller_rules(admin, token_names, issuers).map(|rule| ("auth.admin".into(), rule));
    let policies = policies.iter().enumerate().flat_map(|(i, policy)| {
        let key = format!("auth.policies[{i}]");
        let callers = caller_rules(&policy.callers(), token_names, issuers);
        let rules = callers.into_iter().chain(policy_rules(policy));
        rules.map(move |rule| (key.clone(), rule))
    });
    let broken = admin
        .into_iter()
        .chain(policies)
        .find_map(|(key, (field, broken))| Some((key, field, broken?)));
    match broken {
        Some((key, "", message)) => Err(err(&key, message)),
        Some((key, field, message)) => Err(err(&format!("{key}.{field}"), message)),
        None => Ok(()),
    }
}

/// What any entry that names callers must hold: known token names, a known issuer, and an issuer
/// named when JWT matches could come from several (fail closed: a role, subject or scope of the
/// least trusted issuer would count).
fn caller_rules(callers: &Callers, token_names: &[String], issuers: &[&str]) -> [Rule; 3] {
    let jwt_matches =
        !(callers.subjects.is_empty() && callers.roles.is_empty() && callers.scopes.is_empty());
    let unknown_token = callers
        .tokens
        .iter()
        .find(|name| !token_names.contains(name));
    let unknown_issuer = callers
        .issuer
        .as_ref()
        .filter(|i| !issuers.contains(&i.as_str()));
    [
        ("tokens", unknown_token.map(|name| format!(
            "no auth.mcp_tokens entry is named {name:?} (the names are {token_names:?}; a plain \
             entry is named token-<its position from 1>)"
        ))),
        ("issuer", unknown_issuer.map(|issuer| format!(
            "{issuer:?} is not one of the auth.issuers; copy its `issuer` exactly"
        ))),
        ("issuer", (callers.issuer.is_none() && jwt_matches && issuers.len() > 1).then(|| format!(
            "{} issuers are configured, and this entry matches JWT subjects, roles or scopes of \
             any of them: name the issuer they are trusted from (one entry per issuer)",
            issuers.len()
        ))),
    ]
}

/// What a policy must hold besides: it names callers, and tools as valid globs.
fn policy_rules(policy: &PolicyConfig) -> [Rule; 3] {
    let no_callers = policy.callers().is_empty() && !policy.everyone;
    let bad_glob = policy.tools.iter().find_map(|pattern| {
        tool_glob(pattern)
            .err()
            .map(|e| format!("{pattern:?}: {e}"))
    });
    [
        (
            "",
            no_callers.then(|| {
                "names no caller: set tokens, subjects, roles or scopes (or everyone = true)".into()
            }),
        ),
        (
            "tools",
            policy
                .tools
                .is_empty()
                .then(|| "list the tools (globs such as \"demo__*\") these callers may use".into()),
        ),
        ("tools", bad_glob),
    ]
}
