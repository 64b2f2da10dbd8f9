//! The documentation keeps up with the code: every `path/file.rs::name`
//! that docs/architecture.md names exists, README.md stays short, and every
//! relative link in README.md and docs/*.md points to a file that exists.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every `` `some/path.rs::name` `` in `text`, as (path, name).
fn references(text: &str) -> Vec<(String, String)> {
    let mut refs = Vec::new();
    for span in text.split('`').skip(1).step_by(2) {
        let Some((path, name)) = span.split_once(".rs::") else {
            continue;
        };
        let path = format!("{path}.rs");
        let ok_path = !path.is_empty()
            && path
                .chars()
                .all(|c| is_ident(c) || c == '/' || c == '.' || c == '-');
        let ok_name = !name.is_empty() && name.chars().all(is_ident);
        if ok_path && ok_name {
            refs.push((path, name.to_string()));
        }
    }
    refs
}

/// Whether `word` occurs in `line` followed by `name` as a whole identifier,
/// and then by a character accepted by `next_ok`.
fn defines_with(line: &str, word: &str, name: &str, next_ok: impl Fn(char) -> bool) -> bool {
    let pat = format!("{word} {name}");
    let mut from = 0;
    while let Some(i) = line[from..].find(&pat) {
        let at = from + i;
        let before_ok = line[..at].chars().next_back().is_none_or(|c| !is_ident(c));
        let next = line[at + pat.len()..].chars().next();
        if before_ok && next.is_some_and(&next_ok) {
            return true;
        }
        from = at + pat.len();
    }
    false
}

/// Whether `source` defines `name`: `fn name(` or `fn name<`, or
/// `struct|enum|trait|const|static|type|mod name`.
fn defines(source: &str, name: &str) -> bool {
    source.lines().any(|line| {
        defines_with(line, "fn", name, |c| c == '(' || c == '<')
            || ["struct", "enum", "trait", "const", "static", "type", "mod"]
                .iter()
                .any(|w| defines_with(line, w, name, |c| !is_ident(c)))
    })
}

/// The references that do not resolve, with the reason.
fn unresolved(root: &Path, refs: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (path, name) in refs {
        let file = root.join(path);
        if !file.is_file() {
            bad.push(format!("{path}::{name}: no file {path}"));
        } else if !defines(&read(&file), name) {
            bad.push(format!("{path}::{name}: {path} defines no `{name}`"));
        }
    }
    bad
}

#[test]
fn architecture_names_real_files_and_functions() {
    let root = root();
    let text = read(&root.join("docs/architecture.md"));
    let refs = references(&text);
    assert!(
        refs.len() >= 20,
        "docs/architecture.md has only {} `file.rs::name` references",
        refs.len()
    );
    let bad = unresolved(&root, &refs);
    assert!(
        bad.is_empty(),
        "stale references in docs/architecture.md:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_checker_catches_a_wrong_name() {
    // So the test above cannot pass by resolving anything.
    let root = root();
    let refs = vec![
        (
            "src/commands/dispatch.rs".to_string(),
            "no_such_function".to_string(),
        ),
        ("src/no/such/file.rs".to_string(), "call".to_string()),
    ];
    assert_eq!(unresolved(&root, &refs).len(), 2);
    assert!(unresolved(&root, &[("src/commands/dispatch.rs".into(), "call".into())]).is_empty());
    assert_eq!(
        references("x `src/a.rs::f` and `b.rs::G_1` not `a::b` or `x.rs::a b`"),
        vec![
            ("src/a.rs".to_string(), "f".to_string()),
            ("b.rs".to_string(), "G_1".to_string())
        ]
    );
    assert!(defines("pub(crate) async fn serve<S>(", "serve"));
    assert!(defines("static PEAK: AtomicU64", "PEAK"));
    assert!(!defines("fn served(", "serve"));
    assert!(!defines("let call = fn_call(", "call"));
}

#[test]
fn readme_is_short() {
    let n = read(&root().join("README.md")).lines().count();
    assert!(n <= 300, "README.md has {n} lines (at most 300)");
}

/// The targets of the inline links and images `[text](target)` in `text`.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut in_code_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code_block = !in_code_block;
            continue;
        }
        if in_code_block {
            continue;
        }
        // Inline code spans are not links.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            targets.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    targets
}

#[test]
fn relative_links_point_to_existing_files() {
    let root = root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("a docs/ directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "no docs/*.md");
    files.extend(docs);
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in &files {
        let dir = file.parent().unwrap();
        for target in link_targets(&read(file)) {
            let path = target.split('#').next().unwrap_or("");
            if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            if !dir.join(path).exists() {
                bad.push(format!("{}: {target}", file.display()));
            }
        }
    }
    assert!(checked > 0, "no relative links found");
    assert!(
        bad.is_empty(),
        "links to missing files:\n{}",
        bad.join("\n")
    );
}
