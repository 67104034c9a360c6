//! A config problem: the file (or the environment), the key, and what to do about it.

use std::{fmt, path::Path};

/// A config problem: which file, which key, what is wrong and (in the message) what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "config error in {}: {}", self.file, self.message)
        } else {
            write!(
                f,
                "config error in {}: key `{}`: {}",
                self.file, self.key, self.message
            )
        }
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    pub(super) fn new(file: &Path, key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            file: file.display().to_string(),
            key: key.into(),
            message: message.into(),
        }
    }

    pub(super) fn read(file: &Path, error: &std::io::Error) -> Self {
        let hint = if error.kind() == std::io::ErrorKind::NotFound {
            " (pass --config PATH, or run from the repository root where config/bridge.toml is)"
        } else {
            ""
        };
        Self::new(file, "", format!("cannot read the file: {error}{hint}"))
    }

    pub(super) fn env(var: &str, message: String) -> Self {
        Self {
            file: "environment".into(),
            key: var.into(),
            message,
        }
    }

    pub(super) fn syntax(file: &Path, error: &toml::de::Error) -> Self {
        Self::new(file, "", one_line(&error.to_string()))
    }

    pub(super) fn from_serde(
        file: &Path,
        error: serde_path_to_error::Error<toml::de::Error>,
    ) -> Self {
        let key = error.path().to_string();
        let key = if key == "." { String::new() } else { key };
        Self::new(file, key, one_line(error.inner().message()))
    }
}

/// toml renders errors over several lines with a source excerpt; keep them on one.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
