//! The shape of the crate, kept by a test: no cycle between the top-level modules of `src/`,
//! and `model` (the shared vocabulary) a leaf that references no other module of the bridge.
//!
//! It reads the source text rather than compiler output so that it needs nothing but the
//! files: for every file under `src/` (not `src/bin`, not the crate roots `lib.rs`/`main.rs`)
//! it collects the top-level modules the file's code names, as `crate::name…` or inside
//! `use crate::{name…, other::{…}}`, with comments and string literals left out. A file
//! `src/x.rs` or `src/x/…` belongs to module `x`.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn top_level_modules_form_no_cycle() {
    let graph = module_graph(&src_dir());
    println!("module → the modules it references:\n{}", show(&graph));
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "the top-level modules form a cycle: {}\nthe whole graph:\n{}",
            cycle.join(" → "),
            show(&graph)
        );
    }
}

#[test]
fn model_references_no_other_module() {
    let graph = module_graph(&src_dir());
    let model = graph
        .get("model")
        .expect("src/model/ exists (the shared vocabulary)");
    assert!(
        model.is_empty(),
        "model must be a leaf, but it references {model:?}"
    );
}

/// The flow the design names (STYLE.md): `upstream` never knows about SSE subscribers, and
/// `http` never speaks to an upstream.
#[test]
fn upstream_and_http_do_not_know_each_other() {
    let graph = module_graph(&src_dir());
    for (from, to) in [("upstream", "http"), ("http", "upstream")] {
        assert!(
            !graph.get(from).is_some_and(|refs| refs.contains(to)),
            "{from} references {to}\nthe whole graph:\n{}",
            show(&graph)
        );
    }
}

/// The checker itself: it sees every form of reference, and only code.
#[test]
fn references_are_read_from_code_only() {
    let code = r##"
        use crate::{a, b::{c, d::E}, f as g, self};
        use crate::h::I;
        pub(crate) fn x() -> crate :: j::K { crate::k::l() }
        // crate::comment
        /* crate::block /* nested crate::deeper */ */
        const S: &str = "crate::string";
        const R: &str = r#"crate::raw"#;
        fn y<'a>(c: &'a char) -> char { '"' }
        use crate::{
            m,
            n::{o, p::{q}},
        };
    "##;
    let refs = references(&strip_comments_and_strings(code));
    let want: BTreeSet<String> = ["a", "b", "f", "h", "j", "k", "m", "n"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(refs, want);

    let mut graph = Graph::new();
    graph.insert("a".into(), ["b".into()].into());
    graph.insert("b".into(), ["c".into()].into());
    graph.insert("c".into(), ["a".into()].into());
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    graph.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&graph), None);
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// For each top-level module, the other top-level modules its files reference.
fn module_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    for entry in fs::read_dir(src).expect("src/ is readable") {
        let path = entry.expect("src/ entry").path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "bin" {
                collect_rs(&path, &name, &mut files);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            files.push((name, path));
        }
    }
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut graph: Graph = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for (module, path) in &files {
        let text = fs::read_to_string(path).expect("source file is readable");
        let refs = references(&strip_comments_and_strings(&text));
        let edges = graph.get_mut(module).unwrap();
        edges.extend(
            refs.into_iter()
                .filter(|r| r != module && modules.contains(r)),
        );
    }
    graph
}

fn collect_rs(dir: &Path, module: &str, out: &mut Vec<(String, PathBuf)>) {
    for entry in fs::read_dir(dir).expect("module folder is readable") {
        let path = entry.expect("module folder entry").path();
        if path.is_dir() {
            collect_rs(&path, module, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((module.to_string(), path));
        }
    }
}

/// The source with comments removed and string and char literals emptied, so that neither
/// prose nor data counts as a reference.
fn strip_comments_and_strings(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !is_ident(c[i - 1]))
        {
            // A raw string: r"…" or r#…#"…"#…#.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c[i]);
                i += 1;
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// The top-level names that follow `crate::`, directly or in a `crate::{…}` group (the first
/// segment of every item at the group's top level).
fn references(code: &str) -> BTreeSet<String> {
    let c: Vec<char> = code.chars().collect();
    let mut refs = BTreeSet::new();
    let mut i = 0;
    while i + 5 <= c.len() {
        let word_start = i == 0 || !(is_ident(c[i - 1]) || c[i - 1] == '$');
        if !(word_start && c[i..i + 5].iter().collect::<String>() == "crate") {
            i += 1;
            continue;
        }
        let mut j = skip_ws(&c, i + 5);
        if !(c.get(j) == Some(&':') && c.get(j + 1) == Some(&':')) {
            i += 5;
            continue;
        }
        j = skip_ws(&c, j + 2);
        if c.get(j) == Some(&'{') {
            j = group_heads(&c, j + 1, &mut refs);
        } else {
            let (name, end) = ident(&c, j);
            refs.extend(name);
            j = end;
        }
        i = j.max(i + 5);
    }
    refs.remove("self");
    refs
}

/// Reads a `{…}` group from just after its `{`: records the first identifier of each item at
/// this level, skips nested groups, and returns the position after the closing `}`.
fn group_heads(c: &[char], mut j: usize, refs: &mut BTreeSet<String>) -> usize {
    let mut expect_head = true;
    let mut depth = 1;
    while j < c.len() && depth > 0 {
        match c[j] {
            '{' => {
                depth += 1;
                j += 1;
            }
            '}' => {
                depth -= 1;
                j += 1;
            }
            ',' if depth == 1 => {
                expect_head = true;
                j += 1;
            }
            ch if depth == 1 && expect_head && is_ident(ch) => {
                let (name, end) = ident(c, j);
                refs.extend(name);
                expect_head = false;
                j = end;
            }
            _ => j += 1,
        }
    }
    j
}

fn skip_ws(c: &[char], mut j: usize) -> usize {
    while c.get(j).is_some_and(|ch| ch.is_whitespace()) {
        j += 1;
    }
    j
}

fn ident(c: &[char], start: usize) -> (Option<String>, usize) {
    let mut end = start;
    while c.get(end).copied().is_some_and(is_ident) {
        end += 1;
    }
    let name: String = c[start..end].iter().collect();
    ((!name.is_empty()).then_some(name), end)
}

/// One cycle of the graph, as a path that starts and ends at the same module, if there is one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(
        node: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_string(), Mark::OnPath);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match marks.get(next).copied().unwrap_or(Mark::New) {
                Mark::OnPath => {
                    let from = path.iter().position(|n| n == next).unwrap();
                    let mut cycle = path[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(cycle) = visit(next, graph, marks, path) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if marks.get(node).copied().unwrap_or(Mark::New) == Mark::New {
            let mut path = Vec::new();
            if let Some(cycle) = visit(node, graph, &mut marks, &mut path) {
                return Some(cycle);
            }
        }
    }
    None
}

fn show(graph: &Graph) -> String {
    graph
        .iter()
        .map(|(m, refs)| {
            let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
            format!("  {m} → {}\n", refs.join(", "))
        })
        .collect()
}
