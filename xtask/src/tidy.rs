//! `cargo xtask test tidy`: the house rules a reviewer would otherwise check by hand.
//!
//! - no source file over [`MAX_LINES`] lines of code (blank lines, comment lines and
//!   `#[cfg(test)]` items left out; test directories and `tests.rs` files too);
//! - no import cycle between the files of one crate (from `crate::` and `super::` paths);
//! - no `#[path]` include (a module lives where its name says);
//! - no two modules of a crate with one name (a module's own `error`, `config` or `driver`
//!   aside), so a name says which module it is;
//! - `cargo xtask`'s usage text names every test step and bench suite there is;
//! - every Markdown file with Rust code blocks is one the `volley-docs` crate runs as
//!   doctests, so no example in the docs goes uncompiled.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::root;

/// The most lines of code a file may hold before it is split by job.
const MAX_LINES: usize = 600;

/// The attribute no file may carry, spelt so that this file does not.
const PATH_ATTRIBUTE: &str = concat!("#[", "path");

/// Where the Markdown doctests are included (see that crate's `lib.rs`).
const DOCS_CRATE: &str = "crates/docs/src/lib.rs";

/// Checks every rule; `steps` are `cargo xtask test`'s, which the usage text must name.
pub(crate) fn run(steps: &[&str]) -> Result<(), String> {
    let root = root();
    let mut problems = Vec::new();
    let sources = rust_files(&root, &["crates", "benches", "xtask"]);
    for file in &sources {
        let text = read(file)?;
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        let lines = lines_of_code(&text);
        if lines > MAX_LINES && !is_test_file(file) {
            problems.push(format!(
                "{shown}: {lines} lines of code (at most {MAX_LINES}: split it by job)"
            ));
        }
        if text
            .lines()
            .any(|l| l.trim_start().starts_with(PATH_ATTRIBUTE))
        {
            problems.push(format!(
                "{shown}: includes a module by #[path] (give it a crate or a place of its own)"
            ));
        }
    }
    for src in crate_sources(&root) {
        for (name, files) in shared_names(&src) {
            let files: Vec<String> = files
                .iter()
                .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
                .collect();
            problems.push(format!(
                "modules sharing the name `{name}`: {}",
                files.join(", ")
            ));
        }
        for cycle in import_cycles(&src)? {
            let files: Vec<String> = cycle
                .iter()
                .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
                .collect();
            problems.push(format!("import cycle: {}", files.join(" <-> ")));
        }
    }
    let usage = crate::usage();
    for name in steps.iter().chain(crate::bench::SUITES) {
        if !usage.contains(name) {
            problems.push(format!("xtask's usage text does not name `{name}`"));
        }
    }
    problems.extend(untested_markdown(&root)?);
    if problems.is_empty() {
        eprintln!(
            "xtask tidy: {} files, no file over {MAX_LINES} lines of code, no import cycle, \
             no #[path], no two modules of a crate with one name, usage complete, every \
             Markdown code block tested",
            sources.len()
        );
        Ok(())
    } else {
        Err(format!("tidy found:\n  {}", problems.join("\n  ")))
    }
}

fn read(file: &Path) -> Result<String, String> {
    fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))
}

/// Every `.rs` file under `dirs`, leaving out build output and fuzz targets (built apart).
fn rust_files(root: &Path, dirs: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.iter().map(|d| root.join(d)).collect();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                if !matches!(name.to_str(), Some("target" | "fuzz" | ".git")) {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Integration tests and test modules kept in files of their own are not held to the
/// size limit (the library code they test is).
fn is_test_file(file: &Path) -> bool {
    file.file_name().is_some_and(|n| n == "tests.rs")
        || file.components().any(|c| c.as_os_str() == "tests")
}

/// Lines that are neither blank nor comments, outside `#[cfg(test)]` items.
fn lines_of_code(text: &str) -> usize {
    strip_tests(text)
        .iter()
        .filter(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with("//")
        })
        .count()
}

/// The lines of `text` with each `#[cfg(test)]` item (a braced block, or an item ending
/// in `;`) left out and each line's `//` comment cut off.
fn strip_tests(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim().starts_with("#[cfg(test)]") {
            i += 1;
            let (mut depth, mut opened) = (0i64, false);
            while i < lines.len() {
                let code = code_part(lines[i]);
                depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
                opened |= code.contains('{');
                i += 1;
                if (opened && depth <= 0) || (!opened && code.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        out.push(code_part(lines[i]));
        i += 1;
    }
    out
}

fn code_part(line: &str) -> &str {
    line.split("//").next().unwrap_or_default()
}

/// Every crate's `src` directory: a `src` beside a `Cargo.toml`.
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let mut out: BTreeSet<PathBuf> = BTreeSet::new();
    for file in rust_files(root, &["crates", "benches", "xtask"]) {
        let mut dir = file.parent();
        while let Some(d) = dir {
            if d.file_name().is_some_and(|n| n == "src")
                && d.parent().is_some_and(|p| p.join("Cargo.toml").is_file())
            {
                out.insert(d.to_path_buf());
                break;
            }
            dir = d.parent();
        }
    }
    out.into_iter().collect()
}

/// The module names that more than one file of the crate in `src` takes (a `mod.rs` takes
/// its directory's name), leaving out the crate root, tests, binaries and the names every
/// module may have one of.
fn shared_names(src: &Path) -> Vec<(String, Vec<PathBuf>)> {
    let mut names: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for file in rust_files(src, &[""]) {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        if rel
            .components()
            .any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "bin")))
        {
            continue;
        }
        let stem = rel.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let name = if stem == "mod" {
            rel.parent()
                .and_then(|p| p.file_name())
                .and_then(|n| n.to_str())
                .unwrap_or_default()
        } else {
            stem
        };
        if !matches!(
            name,
            "" | "lib" | "main" | "tests" | "error" | "config" | "driver"
        ) {
            names.entry(name.to_owned()).or_default().push(file);
        }
    }
    names
        .into_iter()
        .filter(|(_, files)| files.len() > 1)
        .collect()
}

/// A module's path within its crate (`["peer", "call"]` for `src/peer/call.rs`).
type ModPath = Vec<String>;

/// The import cycles between the files of the crate whose sources are in `src`: each a
/// set of files that reach each other through `crate::` and `super::` paths. A path to a
/// module's own ancestor (its parent declares it) is not an edge; test modules, `tests/`
/// and `bin/` are left out.
fn import_cycles(src: &Path) -> Result<Vec<Vec<PathBuf>>, String> {
    let mut files: BTreeMap<ModPath, PathBuf> = BTreeMap::new();
    for file in rust_files(src, &[""]) {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        if rel
            .components()
            .any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "bin")))
            || rel.file_name().is_some_and(|n| n == "tests.rs")
        {
            continue;
        }
        let mut parts: ModPath = rel
            .components()
            .filter_map(|c| c.as_os_str().to_str().map(str::to_owned))
            .filter(|c| c != ".")
            .collect();
        if let Some(last) = parts.pop() {
            let stem = last.trim_end_matches(".rs").to_owned();
            if !matches!(stem.as_str(), "lib" | "main" | "mod") {
                parts.push(stem);
            }
        }
        files.insert(parts, file);
    }
    let reexports = root_reexports(&files)?;
    let mut edges: BTreeMap<&ModPath, BTreeSet<&ModPath>> = BTreeMap::new();
    for (module, file) in &files {
        let text = strip_tests(&read(file)?).join("\n");
        let targets = edges.entry(module).or_default();
        for (anchor, rest) in paths_in(&text) {
            let mut base: ModPath = if anchor == "crate" {
                Vec::new()
            } else {
                module[..module.len().saturating_sub(1)].to_vec()
            };
            let mut rest = rest.as_slice();
            while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
                base.pop();
                rest = tail;
            }
            let target = (0..=rest.len()).rev().find_map(|k| {
                let mut candidate = base.clone();
                candidate.extend(rest[..k].iter().cloned());
                files.get_key_value(&candidate).map(|(key, _)| key)
            });
            // `crate::Name` where the crate root re-exports `Name` leads to the module
            // that defines it, not to the root.
            let target = match (target, rest.first()) {
                (Some(root), Some(name)) if root.is_empty() => reexports
                    .get(name)
                    .and_then(|m| files.get_key_value(m))
                    .map(|(key, _)| key)
                    .or(Some(root)),
                (target, _) => target,
            };
            if let Some(target) = target {
                let ancestor = target.len() < module.len() && module.starts_with(target);
                if target != module && !ancestor {
                    targets.insert(target);
                }
            }
        }
    }
    Ok(strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.into_iter().map(|m| files[m].clone()).collect())
        .collect())
}

/// The names the crate root (`lib.rs` or `main.rs`) re-exports with `pub use`, and the
/// module each comes from.
fn root_reexports(files: &BTreeMap<ModPath, PathBuf>) -> Result<BTreeMap<String, ModPath>, String> {
    let mut out = BTreeMap::new();
    let Some(root) = files.get(&Vec::new()) else {
        return Ok(out);
    };
    let text = strip_tests(&read(root)?).join("\n");
    for statement in text.split(';') {
        let Some(body) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let (path, names) = match body.split_once("::{") {
            Some((path, names)) => (path, names.trim_end_matches('}').to_owned()),
            None => match body.rsplit_once("::") {
                Some((path, name)) => (path, name.to_owned()),
                None => continue,
            },
        };
        let module: ModPath = path
            .split("::")
            .map(str::trim)
            .filter(|p| !matches!(*p, "crate" | "self" | ""))
            .map(str::to_owned)
            .collect();
        for name in names.split(',') {
            let name = name.rsplit(" as ").next().unwrap_or_default().trim();
            if !name.is_empty() && !name.contains(['{', '}', ':']) {
                out.insert(name.to_owned(), module.clone());
            }
        }
    }
    Ok(out)
}

/// Each `crate::a::b` or `super::a` path in `text`: its anchor and the segments after it.
fn paths_in(text: &str) -> Vec<(&'static str, Vec<String>)> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for anchor in ["crate", "super"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(anchor).map(|i| i + from) {
            from = at + anchor.len();
            let before_ok = !text[..at].chars().next_back().is_some_and(word);
            if !before_ok {
                continue;
            }
            let mut segments = Vec::new();
            let mut rest = &text[from..];
            while let Some(tail) = rest.strip_prefix("::") {
                let len = tail.find(|c: char| !word(c)).unwrap_or(tail.len());
                if len == 0 {
                    break;
                }
                segments.push(tail[..len].to_owned());
                rest = &tail[len..];
            }
            if !segments.is_empty() {
                // Past the whole path, so `super::super::a` is one path, not two.
                from = text.len() - rest.len();
                out.push((anchor, segments));
            }
        }
    }
    out
}

/// Tarjan's strongly connected components of `edges`.
fn strongly_connected<'a>(
    edges: &BTreeMap<&'a ModPath, BTreeSet<&'a ModPath>>,
) -> Vec<Vec<&'a ModPath>> {
    struct Walk<'a, 'e> {
        edges: &'e BTreeMap<&'a ModPath, BTreeSet<&'a ModPath>>,
        index: BTreeMap<&'a ModPath, (usize, usize)>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        out: Vec<Vec<&'a ModPath>>,
    }
    impl<'a> Walk<'a, '_> {
        fn visit(&mut self, v: &'a ModPath) {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.index[w].1.min(self.index[v].1);
                    self.index.get_mut(v).expect("visited").1 = low;
                } else if self.on_stack.contains(w) {
                    let low = self.index[w].0.min(self.index[v].1);
                    self.index.get_mut(v).expect("visited").1 = low;
                }
            }
            if self.index[v].0 == self.index[v].1 {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                self.out.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

/// Markdown files with Rust code blocks that the docs crate does not include.
fn untested_markdown(root: &Path) -> Result<Vec<String>, String> {
    let host = read(&root.join(DOCS_CRATE))?;
    let mut markdown = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    if let Ok(entries) = fs::read_dir(root.join("docs")) {
        markdown.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "md")),
        );
    }
    let mut out = Vec::new();
    for file in markdown {
        let text = read(&file)?;
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let has_rust = text
            .lines()
            .any(|l| matches!(l.trim(), "```rust" | "```rust,no_run" | "```rust,ignore"));
        if has_rust && !host.contains(&format!("/{shown}\")")) {
            out.push(format!(
                "{shown} has Rust code blocks that {DOCS_CRATE} does not include as doctests"
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_code_and_leaves_out_comments_blanks_and_test_modules() {
        let text = "// a comment\nfn a() {}\n\n#[cfg(test)]\nmod tests {\n    fn b() {}\n}\nfn c() {} // why\n";
        assert_eq!(lines_of_code(text), 2);
    }

    #[test]
    fn finds_crate_and_super_paths() {
        let paths = paths_in("use crate::peer::call; x(super::super::a); my_crate::b; crate::c");
        let shown: Vec<String> = paths
            .iter()
            .map(|(a, s)| format!("{a}:{}", s.join("/")))
            .collect();
        assert_eq!(
            shown,
            ["crate:peer/call", "crate:c", "super:super/a"],
            "my_crate:: is not crate::"
        );
    }

    #[test]
    fn a_cycle_between_two_files_is_found_and_a_parent_is_not_an_edge() {
        let dir = std::env::temp_dir().join(format!("xtask-tidy-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("peer")).expect("scratch dir");
        let write = |name: &str, text: &str| fs::write(dir.join(name), text).expect("write");
        write("lib.rs", "mod a; mod b; mod peer;");
        write("a.rs", "use crate::b::X;");
        write("b.rs", "use crate::a::Y;");
        write("peer/mod.rs", "mod call; use crate::a::Y;");
        write("peer/call.rs", "use super::Z;");
        // A cycle through a name the root re-exports is a cycle too.
        write(
            "lib.rs",
            "mod a; mod b; mod c; mod d; mod peer; pub use d::Thing;",
        );
        write("c.rs", "use crate::Thing;");
        write("d.rs", "use crate::c::Other;");
        let cycles = import_cycles(&dir).expect("read");
        fs::remove_dir_all(&dir).expect("clean up");
        let names: BTreeSet<BTreeSet<String>> = cycles
            .iter()
            .map(|cycle| {
                cycle
                    .iter()
                    .map(|p| {
                        p.file_name()
                            .unwrap_or_default()
                            .to_string_lossy()
                            .into_owned()
                    })
                    .collect()
            })
            .collect();
        let pair = |a: &str, b: &str| BTreeSet::from([a.to_owned(), b.to_owned()]);
        assert_eq!(
            names,
            BTreeSet::from([pair("a.rs", "b.rs"), pair("c.rs", "d.rs")])
        );
    }
}
