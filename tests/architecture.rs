//! The shape of the bridge, kept by a test (docs/design/README.md draws it):
//! - [`LAYERS`]: which top-level modules of `src/` each one may use, and nothing else;
//! - no cycle between files anywhere in `src/`: no file names one that names it back, directly
//!   or around a loop (an inherent `impl` of a type in another file counts as the type's file
//!   using that file: a type's behaviour spread over files is a loop);
//! - protocol revisions are named in code only by the revision adapters and the negotiation
//!   (comments, doc comments and tests may name them).
//!
//! The sources are parsed (syn), not compiled: a file's references are the module paths in its
//! `use` trees, its code and its macros (`crate::`, `super::`, `self::`, its child modules), an
//! item re-exported by a `mod.rs` resolved to the file that defines it. `#[cfg(test)]` items are
//! left out: a test may look anywhere.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

use std::sync::OnceLock;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// Each top-level module of `src/`, and the top-level modules it may use. Read downwards: a
/// module uses only modules listed above it.
const LAYERS: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("redact", &[]),
    ("wait", &[]),
    ("shutdown", &[]),
    ("tls", &[]),
    ("metrics", &[]),
    ("config", &["model", "tls", "redact"]),
    ("auth", &["config", "model", "metrics"]),
    ("traces", &["shutdown", "redact"]),
    ("cli", &["auth", "config", "model", "tls"]),
    ("events", &["model"]),
    ("rmcp_ext", &["metrics"]),
    (
        "store",
        &[
            "events", "model", "config", "shutdown", "wait", "metrics", "redact",
        ],
    ),
    (
        "upstream",
        &[
            "config", "model", "metrics", "tls", "shutdown", "wait", "traces", "rmcp_ext", "redact",
        ],
    ),
    (
        "jobs",
        &[
            "store", "events", "model", "config", "metrics", "shutdown", "wait", "traces", "redact",
        ],
    ),
    (
        "front",
        &[
            "jobs", "events", "upstream", "auth", "config", "model", "metrics", "shutdown", "wait",
            "traces", "rmcp_ext", "redact",
        ],
    ),
    (
        "http",
        &[
            "front", "jobs", "events", "auth", "config", "model", "metrics", "shutdown", "wait",
            "redact",
        ],
    ),
    ("app", &["*"]),
];

/// The files that may name a protocol revision: the revision adapters and the negotiation.
const REVISION_FILES: &[&str] = &[
    // The negotiation: the revisions an upstream is offered, the one a session-less caller
    // speaks, and the `protocol` setting that chooses between them.
    "config/sections.rs",
    "front/caller.rs",
    "upstream/supervisor.rs",
    // The adapter of the 2025-11-25 tasks (the Tasks extension is rmcp's own shape).
    "front/tasks_2025.rs",
];

/// Known breaches of the rules above, while the restructuring of issue 24 lands: each entry
/// goes when its breach does (the tests fail on an entry that no longer matches anything).
const PENDING_EDGES: &[&str] = &[];
/// Folders whose files may still form cycles among themselves.
const PENDING_TANGLES: &[&str] = &[];
/// Files that still name a revision.
const PENDING_REVISION_FILES: &[&str] = &[];

const REVISIONS: &[&str] = &[
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

#[test]
fn top_level_modules_use_only_what_the_layers_allow() {
    let graph = &shape().modules;
    println!("module → the modules it uses:\n{}", show(graph));
    let layers: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut breaches = BTreeSet::new();
    for (from, tos) in graph {
        let Some(allowed) = layers.get(from.as_str()) else {
            breaches.insert(format!(
                "{from} is not in LAYERS: add it, with what it may use"
            ));
            continue;
        };
        for to in tos {
            if !allowed.contains(&"*") && !allowed.contains(&to.as_str()) {
                breaches.insert(format!("{from} -> {to}"));
            }
        }
    }
    check_pending("edges", breaches, PENDING_EDGES);
}

#[test]
fn top_level_modules_form_no_cycle() {
    let graph = &shape().modules;
    if let Some(cycle) = strongly_connected(graph).into_iter().next() {
        panic!(
            "the top-level modules form a cycle among {cycle:?}\n{}",
            show(graph)
        );
    }
}

#[test]
fn model_references_no_other_module() {
    let graph = &shape().modules;
    let model = graph
        .get("model")
        .expect("src/model/ exists (the shared vocabulary)");
    assert!(
        model.is_empty(),
        "model must be a leaf, but it references {model:?}"
    );
}

/// The flow the design names (STYLE.md): `upstream` never knows about SSE subscribers, and
/// `http` never speaks to an upstream nor reads a store.
#[test]
fn upstream_and_http_do_not_know_each_other() {
    let graph = &shape().modules;
    for (from, to) in [("upstream", "http"), ("http", "upstream")] {
        assert!(
            !graph.get(from).is_some_and(|refs| refs.contains(to)),
            "{from} references {to}\n{}",
            show(graph)
        );
    }
}

#[test]
fn no_file_calls_back_into_one_that_calls_it() {
    let graph = &shape().files;
    let mut tangles = BTreeSet::new();
    for cycle in strongly_connected(graph) {
        let pending = PENDING_TANGLES
            .iter()
            .find(|folder| cycle.iter().all(|file| file.starts_with(*folder)));
        let shown = cycle
            .iter()
            .map(|f| format!("  {f} → {:?}", graph[f]))
            .collect::<Vec<_>>();
        match pending {
            Some(folder) => tangles.insert(folder.to_string()),
            None => tangles.insert(format!("these files use each other:\n{}", shown.join("\n"))),
        };
    }
    check_pending("tangles", tangles, PENDING_TANGLES);
}

#[test]
fn only_the_adapters_name_a_revision() {
    let mut naming = BTreeSet::new();
    for (file, text) in &shape().texts {
        let code = code_words(text);
        let spelled = REVISIONS
            .iter()
            .any(|r| code.contains(r) || code.contains(&r.replace('-', "_")));
        if spelled && !REVISION_FILES.contains(&file.as_str()) {
            naming.insert(file.clone());
        }
    }
    check_pending("revision files", naming, PENDING_REVISION_FILES);
}

/// The checker itself: it sees `use` trees, paths in code and in macros, re-exports, impls of
/// types defined elsewhere, and nothing in comments, strings or tests.
#[test]
fn references_are_read_from_code_only() {
    let lib = "mod a; mod b; mod c; mod d;";
    let a = r##"
        use crate::{b::{self, Thing}, c as see};
        // crate::d::in_a_comment
        const S: &str = "crate::d::in_a_string";
        #[cfg(test)]
        mod tests { use crate::d::Tested; }
    "##;
    let b = "pub fn f() { tracing::info!(x = %crate::c::name()); }";
    let c = "pub use self::inner_is_not_a_module as name; pub struct Defined;";
    let d = "impl crate::c::Defined { fn g() {} }";
    let sources = Sources::from_texts(&[
        ("lib.rs", lib),
        ("a.rs", a),
        ("b.rs", b),
        ("c.rs", c),
        ("d.rs", d),
    ]);
    let graph = sources.file_graph();
    let edges = |f: &str| graph[f].iter().map(String::as_str).collect::<Vec<_>>();
    assert_eq!(edges("a.rs"), ["b.rs", "c.rs"]);
    assert_eq!(edges("b.rs"), ["c.rs"]);
    assert_eq!(
        edges("c.rs"),
        ["d.rs"],
        "an impl elsewhere is used by the type's file"
    );
    assert_eq!(edges("d.rs"), ["c.rs"]);
    assert_eq!(
        strongly_connected(&graph),
        vec![BTreeSet::from(["c.rs".into(), "d.rs".into()])]
    );
}

/// A revision named in a comment, a doc comment or a test is not a breach; in code or in a
/// string of the code, it is.
#[test]
fn revisions_are_read_from_code_only() {
    let text = r#"
        //! At 2025-11-25 ...
        /// Since 2025-06-18.
        // 2024-11-05
        const A: &str = "2026-07-28";
        fn f() -> V { V::V_2025_03_26 }
        #[cfg(test)]
        mod tests { const T: &str = "2025-11-25"; }
    "#;
    let code = code_words(text);
    assert!(
        code.contains("2026-07-28") && code.contains("V_2025_03_26"),
        "{code}"
    );
    for left_out in ["2025-11-25", "2025-06-18", "2024-11-05"] {
        assert!(!code.contains(left_out), "{left_out} in {code}");
    }
}

// ---- the checker -------------------------------------------------------------------------------

/// The identifiers and literals of a file's code, space-separated: comments, doc comments
/// and `#[cfg(test)]` items left out.
fn code_words(text: &str) -> String {
    fn walk(tokens: TokenStream, out: &mut String) {
        let mut tokens = tokens.into_iter().peekable();
        let mut skip_item = false;
        while let Some(token) = tokens.next() {
            match token {
                TokenTree::Punct(p) if p.as_char() == '#' => {
                    // An inner attribute (`#![doc = …]`, from `//!`).
                    if matches!(tokens.peek(), Some(TokenTree::Punct(bang)) if bang.as_char() == '!')
                    {
                        tokens.next();
                    }
                    if let Some(TokenTree::Group(attr)) = tokens.peek() {
                        let inner = attr.stream().to_string();
                        if inner.starts_with("doc") {
                            tokens.next();
                            continue;
                        }
                        if inner.replace(' ', "") == "cfg(test)" {
                            tokens.next();
                            skip_item = true;
                            continue;
                        }
                    }
                }
                TokenTree::Group(group) => {
                    if skip_item && group.delimiter() == proc_macro2::Delimiter::Brace {
                        skip_item = false;
                        continue;
                    }
                    if !skip_item {
                        walk(group.stream(), out);
                    }
                }
                TokenTree::Punct(p) if skip_item && p.as_char() == ';' => skip_item = false,
                TokenTree::Ident(_) | TokenTree::Literal(_) if !skip_item => {
                    out.push_str(&token.to_string());
                    out.push(' ');
                }
                _ => {}
            }
        }
    }
    let tokens: TokenStream = text.parse().expect("a file that tokenizes");
    let mut out = String::new();
    walk(tokens, &mut out);
    out
}

type Graph = BTreeMap<String, BTreeSet<String>>;
type ModPath = Vec<String>;

/// The graphs of the library's files and top-level modules, and the files' texts: read once.
struct Shape {
    files: Graph,
    modules: Graph,
    texts: BTreeMap<String, String>,
}

fn shape() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    SHAPE.get_or_init(|| {
        let sources = Sources::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
        Shape {
            files: sources.file_graph(),
            modules: sources.module_graph(),
            texts: sources.texts,
        }
    })
}

/// Fails on every breach not in `pending`, and on every pending entry that matches no breach.
fn check_pending(what: &str, breaches: BTreeSet<String>, pending: &[&str]) {
    let unexpected: Vec<&String> = breaches
        .iter()
        .filter(|b| !pending.contains(&b.as_str()))
        .collect();
    let mended: Vec<&&str> = pending.iter().filter(|p| !breaches.contains(**p)).collect();
    assert!(
        unexpected.is_empty(),
        "{what}: breaches of the shape:\n{unexpected:#?}"
    );
    assert!(
        mended.is_empty(),
        "{what}: these pending entries are mended, remove them: {mended:?}"
    );
}

/// The library's files: each one's module path, syntax tree and text.
struct Sources {
    files: BTreeMap<ModPath, (String, syn::File)>,
    texts: BTreeMap<String, String>,
}

impl Sources {
    fn read(src: &Path) -> Self {
        let mut texts = Vec::new();
        collect(src, src, &mut texts);
        let texts: Vec<(&str, &str)> = texts
            .iter()
            .map(|(f, t)| (f.as_str(), t.as_str()))
            .collect();
        Self::from_texts(&texts)
    }

    /// `files`: paths relative to `src/`, with their text.
    fn from_texts(files: &[(&str, &str)]) -> Self {
        let mut parsed = BTreeMap::new();
        let mut texts = BTreeMap::new();
        for (file, text) in files {
            let tree =
                syn::parse_file(text).unwrap_or_else(|e| panic!("{file} does not parse: {e}"));
            parsed.insert(module_path(file), (file.to_string(), tree));
            texts.insert(file.to_string(), text.to_string());
        }
        Self {
            files: parsed,
            texts,
        }
    }

    /// File → the files its code uses (the crate root and the file itself left out).
    fn file_graph(&self) -> Graph {
        let refs: BTreeMap<&ModPath, References> = self
            .files
            .iter()
            .map(|(path, (_, tree))| (path, References::of(path, tree)))
            .collect();
        let name = |m: &ModPath| self.files[m].0.clone();
        let mut graph: Graph = self
            .files
            .values()
            .map(|(f, _)| (f.clone(), BTreeSet::new()))
            .collect();
        for (from, found) in &refs {
            for path in &found.paths {
                if let Some(to) = self.defining_module(path, &refs)
                    && &to != *from
                    && !to.is_empty()
                {
                    graph.get_mut(&name(from)).unwrap().insert(name(&to));
                }
            }
            for ty in &found.impls {
                if let Some(owner) = self.defining_module(ty, &refs)
                    && &owner != *from
                    && !owner.is_empty()
                {
                    graph.get_mut(&name(&owner)).unwrap().insert(name(from));
                }
            }
        }
        graph
    }

    /// Top-level module → the top-level modules its files use.
    fn module_graph(&self) -> Graph {
        let top = |file: &String| file.split(['/', '.']).next().unwrap().to_string();
        let mut graph = Graph::new();
        for (from, tos) in self.file_graph() {
            if from == "lib.rs" {
                continue;
            }
            let entry = graph.entry(top(&from)).or_default();
            entry.extend(tos.iter().map(top).filter(|to| *to != top(&from)));
        }
        graph
    }

    /// The module whose file defines what `path` (absolute) names: the longest prefix that is a
    /// module, followed through the re-exports of that module's file.
    fn defining_module(
        &self,
        path: &[String],
        refs: &BTreeMap<&ModPath, References>,
    ) -> Option<ModPath> {
        let mut path = path.to_vec();
        for _ in 0..8 {
            let module = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|m| self.files.contains_key(m))?;
            let Some(item) = path.get(module.len()) else {
                return Some(module);
            };
            match refs[&module].reexports.get(item) {
                Some(target) if *target != path[..=module.len()] => {
                    path = target
                        .iter()
                        .chain(&path[module.len() + 1..])
                        .cloned()
                        .collect();
                }
                _ => return Some(module),
            }
        }
        None
    }
}

/// What one file's code names, as absolute module paths.
#[derive(Default)]
struct References {
    here: ModPath,
    children: BTreeSet<String>,
    /// Every path the file uses.
    paths: BTreeSet<ModPath>,
    /// Names brought in by `use` (the last segment or its rename) → the absolute path.
    bindings: BTreeMap<String, ModPath>,
    /// Those of `pub use` items: what the file re-exports.
    reexports: BTreeMap<String, ModPath>,
    /// The types of inherent `impl` blocks, as absolute paths.
    impls: BTreeSet<ModPath>,
}

impl References {
    fn of(here: &ModPath, tree: &syn::File) -> Self {
        let mut found = References {
            here: here.clone(),
            ..Default::default()
        };
        for item in &tree.items {
            if let syn::Item::Mod(m) = item
                && !is_test(&m.attrs)
            {
                found.children.insert(m.ident.to_string());
            }
        }
        found.visit_file(tree);
        let impls = std::mem::take(&mut found.impls);
        found.impls = impls
            .into_iter()
            .map(|ty| match ty.as_slice() {
                [name] => found
                    .bindings
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| here.clone()),
                _ => ty,
            })
            .collect();
        found
    }

    /// `segments` as written in this file, made absolute; `None` for what is not the bridge's
    /// (another crate, a local item).
    fn absolute(&self, segments: &[String]) -> Option<ModPath> {
        let first = segments.first()?;
        let (base, rest): (ModPath, &[String]) = match first.as_str() {
            "crate" => (Vec::new(), &segments[1..]),
            "self" => (self.here.clone(), &segments[1..]),
            "super" => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                let keep = self.here.len().checked_sub(ups)?;
                (self.here[..keep].to_vec(), &segments[ups..])
            }
            child if self.children.contains(child) => (self.here.clone(), segments),
            _ => return None,
        };
        Some(base.into_iter().chain(rest.iter().cloned()).collect())
    }

    fn add(&mut self, segments: &[String]) {
        if let Some(path) = self.absolute(segments) {
            self.paths.insert(path);
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, public: bool) {
        let bind = |this: &mut Self, prefix: &[String], name: String| {
            if let Some(path) = this.absolute(prefix) {
                this.paths.insert(path.clone());
                if public {
                    this.reexports.insert(name.clone(), path.clone());
                }
                this.bindings.insert(name, path);
            }
        };
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, public);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => {
                let name = prefix.last().cloned().unwrap_or_default();
                bind(self, prefix, name);
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                bind(self, prefix, n.ident.to_string());
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                bind(self, prefix, r.rename.to_string());
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.add(&prefix.clone()),
            syn::UseTree::Group(g) => g
                .items
                .iter()
                .for_each(|t| self.use_tree(prefix, t, public)),
        }
    }

    /// Paths inside a macro's tokens: `a :: b :: c` runs of identifiers.
    fn tokens(&mut self, tokens: TokenStream) {
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0;
        for token in tokens {
            match token {
                TokenTree::Ident(ident) if colons == 2 || run.is_empty() => {
                    run.push(ident.to_string());
                    colons = 0;
                }
                TokenTree::Punct(p) if p.as_char() == ':' && !run.is_empty() && colons < 2 => {
                    colons += 1
                }
                other => {
                    self.add(&std::mem::take(&mut run));
                    colons = 0;
                    match other {
                        TokenTree::Group(g) => self.tokens(g.stream()),
                        TokenTree::Ident(ident) => run.push(ident.to_string()),
                        _ => {}
                    }
                }
            }
        }
        self.add(&run);
    }
}

impl<'ast> Visit<'ast> for References {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test(item_attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let public = !matches!(item.vis, syn::Visibility::Inherited);
        self.use_tree(&mut Vec::new(), &item.tree, public);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if item.trait_.is_none()
            && let syn::Type::Path(ty) = &*item.self_ty
        {
            let segments: Vec<String> = ty
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            match segments.as_slice() {
                [_] => {
                    self.impls.insert(segments);
                }
                _ => {
                    if let Some(path) = self.absolute(&segments) {
                        self.impls.insert(path);
                    }
                }
            }
        }
        syn::visit::visit_item_impl(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test(&item.attrs) {
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    /// `pub(super)`, `pub(in crate::x)`: who may see an item, not a use of that module.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.add(&segments);
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        Fn(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        Type(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

/// `front/call.rs` → `front::call`; `front/mod.rs` → `front`; `lib.rs` → the root.
fn module_path(file: &str) -> ModPath {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The library's files under `dir`, relative to `src`: not the binaries (`main.rs`, `bin/`).
fn collect(src: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("src/ entry").path();
        let relative = path
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if path.is_dir() && relative != "bin" {
            collect(src, &path, out);
        } else if relative.ends_with(".rs") && relative != "main.rs" {
            out.push((
                relative,
                fs::read_to_string(&path).expect("source is readable"),
            ));
        }
    }
}

/// The cycles of `graph`: each strongly connected set of two or more nodes (Tarjan).
fn strongly_connected(graph: &Graph) -> Vec<BTreeSet<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, (usize, usize)>,
        stack: Vec<&'g str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, node: &'g str) {
        let n = s.index.len();
        s.index.insert(node, (n, n));
        s.stack.push(node);
        for next in s.graph.get(node).into_iter().flatten() {
            let next = next.as_str();
            if !s.index.contains_key(next) {
                visit(s, next);
                let low = s.index[next].1.min(s.index[node].1);
                s.index.get_mut(node).unwrap().1 = low;
            } else if s.stack.contains(&next) {
                let low = s.index[next].0.min(s.index[node].1);
                s.index.get_mut(node).unwrap().1 = low;
            }
        }
        if s.index[node].0 == s.index[node].1 {
            let at = s.stack.iter().rposition(|n| *n == node).unwrap();
            let set: BTreeSet<String> = s.stack.drain(at..).map(String::from).collect();
            if set.len() > 1 {
                s.out.push(set);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.out
}

fn show(graph: &Graph) -> String {
    graph
        .iter()
        .map(|(m, refs)| {
            format!(
                "  {m} → {}\n",
                refs.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect()
}
