//! Every config key from the environment, by one rule: `BRIDGE__` then the key's path with `__`
//! between its parts, in any case (`BRIDGE__LIMITS__MAX_SESSIONS=200` sets
//! `limits.max_sessions`; `BRIDGE__UPSTREAMS__0__URL` the first upstream's `url`). A value is read
//! as a TOML value when it is one (`200`, `true`, `["a", "b"]`, `{ API_KEY = "env:KEY" }`) and as
//! text otherwise, so a list or a table is set whole. The variables are laid over the file
//! before it is read, so they are checked as the file is, and an error names the variable.
//! Done on the TOML table rather than with a layered config crate: the file keeps its one
//! reader (the error paths, the deprecation advice), and the rule is these few lines.

use toml::{Table, Value};

use super::ConfigError;

/// The prefix of a variable that sets a key.
pub const PREFIX: &str = "BRIDGE__";
/// Variables read at most; more is a config error (a runaway environment, not a config).
pub const MAX_VARS: usize = 256;
/// Longest value read (a whole list of upstream headers fits).
pub const MAX_VALUE_BYTES: usize = 65_536;

/// The `BRIDGE__…` variables of `vars`, bounded.
pub fn key_vars(
    vars: impl Iterator<Item = (String, String)>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut found = Vec::new();
    for (name, value) in vars.filter(|(name, _)| name.starts_with(PREFIX)) {
        if found.len() == MAX_VARS {
            return Err(ConfigError::env(
                &name,
                format!("more than {MAX_VARS} {PREFIX}… variables: set lists and tables whole"),
            ));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(ConfigError::env(
                &name,
                format!("longer than {MAX_VALUE_BYTES} bytes: put it in the file"),
            ));
        }
        found.push((name, value));
    }
    found.sort();
    Ok(found)
}

/// Lay `vars` (from [`key_vars`]) over `table`; each sets the key its name spells.
pub fn overlay(table: &mut Table, vars: &[(String, String)]) -> Result<(), ConfigError> {
    for (name, text) in vars {
        let path: Vec<String> = name[PREFIX.len()..]
            .split("__")
            .map(str::to_ascii_lowercase)
            .collect();
        if path.iter().any(String::is_empty) {
            return Err(ConfigError::env(
                name,
                format!("names no key: write {PREFIX}SECTION__KEY, as in {PREFIX}SERVER__LISTEN"),
            ));
        }
        set(table, &path, value_of(text)).map_err(|why| ConfigError::env(name, why))?;
    }
    Ok(())
}

/// A TOML value when the text is one, else the text itself.
fn value_of(text: &str) -> Value {
    format!("v = {text}")
        .parse::<Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| Value::String(text.to_string()))
}

/// Set `path` in `table` to `value`: tables made on the way; a number indexes a list (the
/// next index past its end adds an entry).
fn set(table: &mut Table, path: &[String], value: Value) -> Result<(), String> {
    let (last, parents) = path.split_last().ok_or("names no key")?;
    let mut at = table;
    for (depth, part) in parents.iter().enumerate() {
        let entry = at
            .entry(part.clone())
            .or_insert_with(|| Value::Table(Table::new()));
        at = match entry {
            Value::Table(t) => t,
            Value::Array(list) => {
                let next = path.get(depth + 1).ok_or("names no key")?;
                let index: usize = next
                    .parse()
                    .map_err(|_| format!("`{part}` is a list: follow it with an index"))?;
                return set_in_list(list, index, &path[depth + 2..], value);
            }
            _ => return Err(format!("`{part}` is not a table")),
        };
    }
    at.insert(last.clone(), value);
    Ok(())
}

fn set_in_list(
    list: &mut Vec<Value>,
    index: usize,
    rest: &[String],
    value: Value,
) -> Result<(), String> {
    if index > list.len() {
        return Err(format!(
            "index {index} skips entries: the list has {}, the next is {}",
            list.len(),
            list.len()
        ));
    }
    if index == list.len() {
        list.push(Value::Table(Table::new()));
    }
    if rest.is_empty() {
        list[index] = value;
        return Ok(());
    }
    match &mut list[index] {
        Value::Table(t) => set(t, rest, value),
        _ => Err(format!("entry {index} is not a table")),
    }
}

/// `error`, said of the environment variable that set its key (when one did).
pub(super) fn said_of_vars(error: ConfigError, vars: &[(String, String)]) -> ConfigError {
    let var = vars.iter().find(|(name, _)| {
        let spelled = name[PREFIX.len()..]
            .split("__")
            .map(|part| match part.parse::<usize>() {
                Ok(i) => format!("[{i}]"),
                Err(_) => format!(".{}", part.to_ascii_lowercase()),
            })
            .collect::<String>();
        let spelled = spelled.trim_start_matches('.');
        error.key == spelled || error.key.starts_with(&format!("{spelled}."))
    });
    match var {
        Some((name, _)) => ConfigError {
            file: format!("{} (with the environment)", error.file),
            message: format!("{} (set by {name})", error.message),
            ..error
        },
        None => error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        key_vars(pairs.iter().map(|(n, v)| (n.to_string(), v.to_string()))).unwrap()
    }

    #[test]
    fn variables_set_keys_lists_and_list_entries() {
        let mut table: Table = "[server]\nlisten = \"127.0.0.1:1\"\n[[upstreams]]\nname = \"a\"\n"
            .parse()
            .unwrap();
        overlay(
            &mut table,
            &vars(&[
                ("BRIDGE__SERVER__LISTEN", "0.0.0.0:8080"),
                ("BRIDGE__LIMITS__MAX_SESSIONS", "200"),
                ("BRIDGE__SERVER__ALLOWED_HOSTS", "[\"a\", \"b\"]"),
                ("BRIDGE__UPSTREAMS__0__URL", "http://x/mcp"),
                ("BRIDGE__UPSTREAMS__1__NAME", "b"),
                ("BRIDGE__UPSTREAMS__1__ENV", "{ API_KEY = \"env:K\" }"),
                ("OTHER", "ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(table["server"]["listen"].as_str(), Some("0.0.0.0:8080"));
        assert_eq!(table["limits"]["max_sessions"].as_integer(), Some(200));
        assert_eq!(
            table["server"]["allowed_hosts"].as_array().unwrap().len(),
            2
        );
        let upstreams = table["upstreams"].as_array().unwrap();
        assert_eq!(upstreams[0]["url"].as_str(), Some("http://x/mcp"));
        assert_eq!(upstreams[1]["name"].as_str(), Some("b"));
        assert_eq!(upstreams[1]["env"]["API_KEY"].as_str(), Some("env:K"));
    }

    #[test]
    fn bad_variables_are_named() {
        let mut table = Table::new();
        for (name, value) in [
            ("BRIDGE__", "x"),
            ("BRIDGE__SERVER____LISTEN", "x"),
            ("BRIDGE__UPSTREAMS__5__URL", "x"),
        ] {
            let mut t: Table = "[[upstreams]]\nname = \"a\"\n".parse().unwrap();
            let error = overlay(&mut t, &vars(&[(name, value)])).unwrap_err();
            assert_eq!(error.key, name, "{error}");
        }
        let many = (0..=MAX_VARS).map(|i| (format!("BRIDGE__X__K{i}"), "1".to_string()));
        assert!(key_vars(many).is_err());
        let long = [("BRIDGE__X__K".to_string(), "x".repeat(MAX_VALUE_BYTES + 1))];
        assert!(key_vars(long.into_iter()).is_err());
        assert!(overlay(&mut table, &[]).is_ok());
    }
}
