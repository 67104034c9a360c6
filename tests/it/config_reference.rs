//! docs/configuration.md is the configuration reference, and it cannot drift from the code.
//!
//! The keys come from the config types themselves: their JSON schema (`schemars`, derived on the
//! same structs serde reads the file into) gives every key, its default (`Default` impls and
//! `#[serde(default = …)]`), whether it is required, and its doc comment. The test fails on a key
//! the doc's tables under "## Keys" leave out, a row for a key that does not exist, a default
//! that differs, an environment variable missing from its key's row (`config::ENV_OVERRIDES`),
//! or a `BRIDGE_*` / `OTEL_*` variable read in `src/` that the doc never names. Every failure
//! says what to write, and all of them are listed at once.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use mcp_progress_bridge::config::{Config, ENV_OVERRIDES};
use serde_json::Value;

const DOC: &str = "docs/configuration.md";
const SCHEMA: &str = "docs/config.schema.json";
/// Where the key tables are: from this heading to the next `## `.
const KEYS_HEADING: &str = "## Keys";

/// One key as the config types define it.
#[derive(Debug)]
struct Key {
    path: String,
    default: Option<Value>,
    required: bool,
    description: String,
}

/// One row of a key table: `| keys | default | env | meaning |`.
#[derive(Debug)]
struct Row {
    line: usize,
    keys: Vec<String>,
    default: String,
    env: Vec<String>,
    meaning: String,
}

#[test]
fn every_config_key_is_documented_with_its_default_and_environment_variable() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join(DOC)).unwrap();
    let keys = schema_keys();
    assert!(
        keys.iter().any(|k| k.path == "server.listen")
            && keys
                .iter()
                .any(|k| k.path == "upstreams[].tools.<name>.mode"),
        "the schema walk lost keys: {keys:#?}"
    );
    let mut problems = check(&keys, &doc);
    problems.extend(undocumented_env_vars(&root.join("src"), &doc));
    assert!(
        problems.is_empty(),
        "{DOC} is out of step with the config types ({} problem(s)):\n\n{}\n",
        problems.len(),
        problems.join("\n\n")
    );
}

/// The checker itself finds each kind of drift (a test that cannot fail is a defect).
#[test]
fn the_check_names_what_to_fix() {
    let keys = vec![
        key(
            "server.listen",
            Some(Value::from("127.0.0.1:8080")),
            "Where to listen.",
        ),
        key("store.redis_url", Some(Value::from("redis://x")), ""),
        key("jobs.history", Some(Value::from(1000)), ""),
        Key {
            required: true,
            ..key("upstreams[].name", None, "")
        },
    ];
    let doc = "## Keys\n\n| key | default | env | meaning |\n| --- | --- | --- | --- |\n\
               | `server.listen` | `127.0.0.1:8080` | `BRIDGE_LISTEN` | a |\n\
               | `store.redis_url` | `redis://y` | | b |\n\
               | `jobs.histroy` | `1000` | | c |\n\
               | `upstreams[].name` | unset | | d |\n\n## Next\n";
    let problems = check(&keys, doc).join("\n");
    for expected in [
        "`jobs.history` is a config key",
        "| `jobs.history` | `1000` |  |",
        "`jobs.histroy`, which no config type has",
        "the default of `store.redis_url` is `redis://x`",
        "`store.redis_url` is set by the environment variable `BRIDGE_REDIS_URL`",
        "`upstreams[].name` is required",
    ] {
        assert!(
            problems.contains(expected),
            "{expected:?} not in:\n{problems}"
        );
    }
    assert!(!problems.contains("server.listen"), "{problems}");
}

fn key(path: &str, default: Option<Value>, description: &str) -> Key {
    Key {
        path: path.into(),
        default,
        required: false,
        description: description.into(),
    }
}

/// docs/config.schema.json is what `mcp-progress-bridge config-schema` prints, so an editor
/// or a CI check of a config reads the keys this build knows.
#[test]
fn the_committed_config_schema_is_the_generated_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = std::fs::read_to_string(root.join(SCHEMA)).unwrap_or_default();
    let generated = serde_json::to_string_pretty(&Config::file_schema()).unwrap() + "\n";
    assert!(
        committed == generated,
        "{SCHEMA} is not the config types' schema: regenerate it with \
         `cargo run -- config-schema > {SCHEMA}`"
    );
    let schema: Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(
        schema["properties"]["server"]["$ref"],
        "#/$defs/ServerConfig"
    );
    assert_eq!(
        schema["additionalProperties"], false,
        "unknown keys are refused"
    );
}

/// Every leaf key of `Config`, with `[]` for an array of tables (`upstreams[].name`) and
/// `<name>` for a table of tables (`upstreams[].tools.<name>.mode`).
fn schema_keys() -> Vec<Key> {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<Config>();
    let mut keys = Vec::new();
    walk(schema.as_value(), "", false, &mut keys);
    keys
}

fn walk(schema: &Value, path: &str, required: bool, out: &mut Vec<Key>) {
    if let Some(table) = table_of(schema) {
        let props = table["properties"].as_object().into_iter().flatten();
        let required: BTreeSet<&str> = table["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, sub) in props {
            let sub_path = match path {
                "" => name.clone(),
                _ => format!("{path}.{name}"),
            };
            walk(sub, &sub_path, required.contains(name.as_str()), out);
        }
    } else if let Some(items) = schema.get("items").filter(|i| table_of(i).is_some()) {
        walk(items, &format!("{path}[]"), false, out);
    } else if let Some(values) = schema
        .get("additionalProperties")
        .filter(|v| table_of(v).is_some())
    {
        walk(values, &format!("{path}.<name>"), false, out);
    } else {
        out.push(Key {
            path: path.into(),
            default: schema.get("default").cloned(),
            required,
            description: schema["description"].as_str().unwrap_or("").into(),
        });
    }
}

/// The table (struct) a schema describes: itself, or the one non-null choice of an `Option`.
fn table_of(schema: &Value) -> Option<&Value> {
    if schema.get("properties").is_some() {
        return Some(schema);
    }
    let choices: Vec<&Value> = schema["anyOf"]
        .as_array()?
        .iter()
        .filter(|c| c["type"] != "null")
        .collect();
    match choices[..] {
        [one] if one.get("properties").is_some() => Some(one),
        _ => None,
    }
}

/// Every disagreement between `keys` and the doc text, each with what to write.
fn check(keys: &[Key], doc: &str) -> Vec<String> {
    let rows = doc_rows(doc);
    let mut problems = Vec::new();
    let mut documented: BTreeMap<&str, &Row> = BTreeMap::new();
    for row in &rows {
        for k in &row.keys {
            if documented.insert(k, row).is_some() {
                problems.push(format!("{DOC}:{}: `{k}` has two rows; keep one", row.line));
            }
        }
    }
    let known: BTreeSet<&str> = keys.iter().map(|k| k.path.as_str()).collect();
    for row in &rows {
        for k in row.keys.iter().filter(|k| !known.contains(k.as_str())) {
            problems.push(format!(
                "{DOC}:{}: documents `{k}`, which no config type has: remove it from the row, or \
                 correct the name (keys are written in full: `upstreams[].timeout_secs`, \
                 `upstreams[].tools.<name>.mode`)",
                row.line
            ));
        }
    }
    for key in keys {
        match documented.get(key.path.as_str()) {
            None => problems.push(missing_row(key)),
            Some(row) => problems.extend(check_row(key, row)),
        }
    }
    problems
}

fn missing_row(key: &Key) -> String {
    let meaning = match key.description.as_str() {
        "" => "<what it does, its bounds>".to_string(),
        d => d.split_whitespace().collect::<Vec<_>>().join(" "),
    };
    format!(
        "`{}` is a config key, but {DOC} has no row for it. Add this row to the table of its \
         section under \"{KEYS_HEADING}\" (the meaning is the field's doc comment; shorten it):\n\
         | `{}` | {} | {} | {meaning} |",
        key.path,
        key.path,
        expected_default(key),
        expected_env(&key.path)
            .iter()
            .map(|e| format!("`{e}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn check_row(key: &Key, row: &Row) -> Vec<String> {
    let mut problems = Vec::new();
    let at = format!("{DOC}:{}", row.line);
    let first_code = code_spans(&row.default).into_iter().next();
    let default_ok = match (&key.default, key.required) {
        (_, true) => row.default.starts_with("required"),
        (Some(v), false) if !v.is_null() => first_code.as_deref() == Some(&render(v)),
        _ => row.default.starts_with("unset") || row.default.starts_with("none"),
    };
    if !default_ok {
        let want = match (&key.default, key.required) {
            (_, true) => format!("`{}` is required: write `required`", key.path),
            (Some(v), false) if !v.is_null() => format!(
                "the default of `{}` is `{}`: start the default cell with it",
                key.path,
                render(v)
            ),
            _ => format!(
                "`{}` has no default value: start the default cell with `unset` or `none` \
                 (and say what leaving it out means)",
                key.path
            ),
        };
        problems.push(format!("{at}: {want} (the doc says {:?})", row.default));
    }
    let want_env: BTreeSet<String> = row.keys.iter().flat_map(|k| expected_env(k)).collect();
    let have_env: BTreeSet<String> = row.env.iter().cloned().collect();
    for missing in want_env.difference(&have_env) {
        problems.push(format!(
            "{at}: `{}` is set by the environment variable `{missing}` \
             (config::ENV_OVERRIDES): put `{missing}` in the row's env column",
            key.path
        ));
    }
    for extra in have_env.difference(&want_env) {
        problems.push(format!(
            "{at}: the env column names `{extra}`, which config::ENV_OVERRIDES does not map to \
             `{}`: remove it, or add it to ENV_OVERRIDES and read it in Overrides::from_env",
            key.path
        ));
    }
    if row.meaning.trim().is_empty() {
        problems.push(format!(
            "{at}: `{}` has no meaning; say what it does",
            key.path
        ));
    }
    problems
}

fn expected_default(key: &Key) -> String {
    match &key.default {
        _ if key.required => "required".into(),
        Some(v) if !v.is_null() => format!("`{}`", render(v)),
        _ => "unset".into(),
    }
}

fn expected_env(path: &str) -> Vec<String> {
    ENV_OVERRIDES
        .iter()
        .filter(|(_, key)| *key == path)
        .map(|(env, _)| env.to_string())
        .collect()
}

/// A default as the doc writes it: strings bare, lists as TOML/JSON arrays.
fn render(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// The rows of every table between `## Keys` and the next `## ` heading whose first cell
/// names keys in backticks (header and separator rows have none).
fn doc_rows(doc: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut inside = false;
    for (i, line) in doc.lines().enumerate() {
        if line.starts_with("## ") {
            inside = line.trim() == KEYS_HEADING;
            continue;
        }
        if !inside || !line.starts_with('|') {
            continue;
        }
        let cells = cells(line);
        let keys = code_spans(cells.first().map_or("", String::as_str));
        if keys.is_empty() {
            continue;
        }
        let cell = |n: usize| match cells.len() {
            4 => cells[n].clone(),
            _ => format!(
                "<the row has {} cells, not 4: key | default | env | meaning>",
                cells.len()
            ),
        };
        rows.push(Row {
            line: i + 1,
            keys,
            default: cell(1),
            env: code_spans(&cell(2)),
            meaning: cell(3),
        });
    }
    rows
}

/// The cells of a table row, split on `|` outside code spans, trimmed.
fn cells(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut current = String::new();
    let mut in_code = false;
    for ch in line
        .trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .chars()
    {
        match ch {
            '`' => {
                in_code = !in_code;
                current.push(ch);
            }
            '|' if !in_code => cells.push(std::mem::take(&mut current).trim().to_string()),
            _ => current.push(ch),
        }
    }
    cells.push(current.trim().to_string());
    cells
}

fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Every `BRIDGE_*` or `OTEL_*` environment variable named in a string literal under `src/`
/// (test and bench harness variables aside) must appear in the doc.
fn undocumented_env_vars(src: &Path, doc: &str) -> Vec<String> {
    let mut files = Vec::new();
    collect_rs(src, &mut files);
    let mut problems = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, _) in text.match_indices('"') {
            let rest = &text[i + 1..];
            if !(rest.starts_with("BRIDGE_") || rest.starts_with("OTEL_")) {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let whole_literal = rest[name.len()..].starts_with('"');
            let harness = name.starts_with("BRIDGE_TEST_") || name.starts_with("BRIDGE_BENCH_");
            // `BRIDGE__SECTION__KEY`: the one rule for every key, documented once.
            let by_rule = name.starts_with("BRIDGE__") && doc.contains("`BRIDGE__`");
            if whole_literal && !harness && !by_rule && !mentions(doc, &name) {
                let file = file.strip_prefix(src.parent().unwrap()).unwrap_or(&file);
                problems.insert(format!(
                    "{} reads the environment variable {name}, which {DOC} does not name: add \
                     `{name}` to its key's row (and to config::ENV_OVERRIDES) if it sets a config \
                     key, else to the list under \"## Where settings come from\"",
                    file.display()
                ));
            }
        }
    }
    problems.into_iter().collect()
}

/// `name` appears in `text` as a whole word (`BRIDGE_LOG_JSON=1` names `BRIDGE_LOG_JSON`).
fn mentions(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back().is_none_or(|c| !word(c));
        let after = text[i + name.len()..]
            .chars()
            .next()
            .is_none_or(|c| !word(c));
        before && after
    })
}

fn collect_rs(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
