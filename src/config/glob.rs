//! Allow/deny lists of glob patterns (`[[upstreams]] expose`, per-token policies): the one
//! matcher every such list in the config uses, so the syntax is the same everywhere.
//!
//! Syntax (docs/configuration.md): a glob over the whole name (`*` any run, `/` included;
//! `?` one character; `[abc]`, `[!abc]`; `{a,b}`; `\` escapes). A pattern starting with `!`
//! denies, and a deny always wins. A name is allowed when it matches an allow and no deny; a
//! list of denies only allows everything else; `[]` allows nothing; no list allows everything.
//! Case-sensitive, like MCP names and URIs. `globset` compiles each list to one automaton.

use std::fmt;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Deserialize;

/// The longest pattern accepted, and the most patterns in one list: a config is operator
/// input, but a pasted list should fail loudly rather than compile to something huge.
const MAX_PATTERN_LEN: usize = 512;
const MAX_PATTERNS: usize = 1024;

/// A compiled allow/deny list. See the module documentation for the syntax.
#[derive(Clone, Deserialize)]
#[serde(try_from = "Vec<String>")]
pub struct GlobList {
    patterns: Vec<String>,
    allow: GlobSet,
    deny: GlobSet,
    /// No allow pattern but some deny: everything not denied is allowed.
    allow_all: bool,
}

/// Written as a list of pattern strings.
impl schemars::JsonSchema for GlobList {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GlobList".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <Vec<String> as schemars::JsonSchema>::json_schema(generator)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GlobError {
    #[error(
        "pattern {pattern:?} is not a valid glob ({reason}); use * ? [abc] {{a,b}}, \\ to escape, and a leading ! to deny"
    )]
    Invalid { pattern: String, reason: String },
    #[error("pattern {0:?} is empty; remove it (\"*\" allows everything)")]
    Empty(String),
    #[error("a pattern is {0} characters long; at most {MAX_PATTERN_LEN} are allowed")]
    TooLong(usize),
    #[error("{0} patterns in one list; at most {MAX_PATTERNS} are allowed")]
    TooMany(usize),
}

impl GlobList {
    /// A list that allows every name (`["*"]`): what a list left out of the config means.
    pub fn all() -> Self {
        Self::parse(["*"]).expect("\"*\" is a valid glob")
    }

    /// Compile a list of patterns (see the module documentation).
    pub fn parse<S: AsRef<str>>(patterns: impl IntoIterator<Item = S>) -> Result<Self, GlobError> {
        let patterns: Vec<String> = patterns
            .into_iter()
            .map(|p| p.as_ref().to_string())
            .collect();
        if patterns.len() > MAX_PATTERNS {
            return Err(GlobError::TooMany(patterns.len()));
        }
        let mut allow = GlobSetBuilder::new();
        let mut deny = GlobSetBuilder::new();
        let (mut allows, mut denies) = (0, 0);
        for pattern in &patterns {
            if pattern.len() > MAX_PATTERN_LEN {
                return Err(GlobError::TooLong(pattern.len()));
            }
            let (negated, glob) = match pattern.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, pattern.as_str()),
            };
            if glob.is_empty() {
                return Err(GlobError::Empty(pattern.clone()));
            }
            let glob = compile(glob).map_err(|e| GlobError::Invalid {
                pattern: pattern.clone(),
                reason: e.kind().to_string(),
            })?;
            if negated {
                deny.add(glob);
                denies += 1;
            } else {
                allow.add(glob);
                allows += 1;
            }
        }
        let build = |b: GlobSetBuilder| {
            b.build().map_err(|e| GlobError::Invalid {
                pattern: patterns.join(", "),
                reason: e.to_string(),
            })
        };
        Ok(Self {
            allow: build(allow)?,
            deny: build(deny)?,
            allow_all: allows == 0 && denies > 0,
            patterns,
        })
    }

    /// Whether `name` is allowed: it matches an allow pattern (or the list has only denies)
    /// and no deny pattern.
    pub fn allows(&self, name: &str) -> bool {
        (self.allow_all || self.allow.is_match(name)) && !self.deny.is_match(name)
    }

    /// The patterns as written, for messages and `/upstreams`.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

fn compile(glob: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(glob)
        .literal_separator(false)
        .backslash_escape(true)
        .empty_alternates(true)
        .build()
}

impl TryFrom<Vec<String>> for GlobList {
    type Error = GlobError;

    fn try_from(patterns: Vec<String>) -> Result<Self, Self::Error> {
        Self::parse(patterns)
    }
}

impl Default for GlobList {
    fn default() -> Self {
        Self::all()
    }
}

impl fmt::Debug for GlobList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("GlobList").field(&self.patterns).finish()
    }
}

impl PartialEq for GlobList {
    fn eq(&self, other: &Self) -> bool {
        self.patterns == other.patterns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(patterns: &[&str]) -> GlobList {
        GlobList::parse(patterns).unwrap()
    }

    #[test]
    fn allow_and_deny() {
        let l = list(&["*", "!delete_*"]);
        assert!(l.allows("echo"));
        assert!(!l.allows("delete_file"));
        assert!(l.allows("undelete_file"), "globs match the whole name");
    }

    #[test]
    fn only_denies_allow_the_rest() {
        assert_eq!(
            list(&["!delete_*"]).allows("echo"),
            list(&["*", "!delete_*"]).allows("echo")
        );
        assert!(!list(&["!delete_*"]).allows("delete_x"));
    }

    #[test]
    fn empty_allows_nothing_and_all_allows_everything() {
        assert!(!list(&[]).allows("echo"));
        assert!(GlobList::all().allows("anything at all"));
    }

    #[test]
    fn deny_wins_over_allow() {
        let l = list(&["get_*", "!get_secret"]);
        assert!(l.allows("get_time"));
        assert!(!l.allows("get_secret"));
        assert!(!l.allows("put_time"), "not allowed by any pattern");
    }

    #[test]
    fn star_crosses_slashes_and_classes_work() {
        let l = list(&["file:///docs/*", "demo://resource/static/document/[ab]*"]);
        assert!(l.allows("file:///docs/a/b/c.md"));
        assert!(l.allows("demo://resource/static/document/architecture.md"));
        assert!(!l.allows("demo://resource/static/document/extension.md"));
        assert!(list(&["{echo,add}"]).allows("add"));
        assert!(list(&["a?c"]).allows("abc"));
        assert!(list(&[r"a\*"]).allows("a*") && !list(&[r"a\*"]).allows("ab"));
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        let e = GlobList::parse(["[abc"]).unwrap_err().to_string();
        assert!(e.contains("\"[abc\"") && e.contains("leading !"), "{e}");
        let e = GlobList::parse(["!"]).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let long = "a".repeat(MAX_PATTERN_LEN + 1);
        assert!(GlobList::parse([long]).is_err());
        assert!(GlobList::parse(vec!["a"; MAX_PATTERNS + 1]).is_err());
    }

    #[test]
    fn deserializes_from_a_toml_array() {
        #[derive(Deserialize)]
        struct T {
            tools: GlobList,
        }
        let t: T = toml::from_str("tools = [\"*\", \"!rm\"]").unwrap();
        assert!(t.tools.allows("ls") && !t.tools.allows("rm"));
        let e = toml::from_str::<T>("tools = [\"[\"]")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not a valid glob"), "{e}");
    }
}
