//! Modules that import each other in a loop, in the crates whose layers must point one way
//! (nuvec-distributed: transports below, algorithms above). A module's imports are the
//! `crate::` and `super::` paths it names (in `use` declarations and in code) and the child
//! modules it names in a `use`; tests (`*_tests.rs`, `mod tests`) and the in-memory test
//! transport are left out, since they may reach across layers.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The crates checked, by their source folder.
pub(crate) const LAYERED: &[&str] = &["crates/nuvec-distributed/src"];

/// A module's path in its crate (`["ring", "network"]`).
type Module = Vec<String>;

fn module_of(src: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Module = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn is_test(module: &Module) -> bool {
    module
        .last()
        .is_some_and(|m| m.ends_with("_tests") || m == "memory")
}

/// The paths of `crate::…` and `super::…` that `code` names, split at `::`.
fn named_paths(code: &str) -> Vec<Vec<&str>> {
    let mut paths = Vec::new();
    for start in ["crate::", "super::"] {
        for (at, _) in code.match_indices(start) {
            let before = code[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let tail = &code[at..];
            let end = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            paths.push(tail[..end].split("::").filter(|s| !s.is_empty()).collect());
        }
    }
    paths
}

/// The known module a path from `module` (in file `is_mod` form or not) names, if any.
fn target(module: &Module, path: &[&str], known: &BTreeSet<Module>) -> Option<Module> {
    let (mut base, mut rest) = (module.clone(), path);
    match rest.first() {
        Some(&"crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some(&"super") => {
            while rest.first() == Some(&"super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => {}
    }
    (0..=rest.len()).rev().find_map(|take| {
        let mut candidate = base.clone();
        candidate.extend(rest[..take].iter().map(|s| s.to_string()));
        known.contains(&candidate).then_some(candidate)
    })
}

/// The import loops among the modules under `src`, each as `a -> b -> … -> a`.
pub(crate) fn loops(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    super::tidy::rust_files(src, &mut files);
    let known: BTreeSet<Module> = files.iter().map(|f| module_of(src, f)).collect();
    let mut imports: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for file in &files {
        let module = module_of(src, file);
        if is_test(&module) {
            continue;
        }
        let text = fs::read_to_string(file).unwrap_or_default();
        let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        let mut found = BTreeSet::new();
        for line in text.lines() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for path in named_paths(code) {
                found.extend(target(&module, &path, &known));
            }
            if let Some(used) = code.strip_prefix("use ") {
                let first = used.split("::").next().unwrap_or("");
                let mut child = module.clone();
                child.push(first.to_string());
                if known.contains(&child) {
                    found.insert(child);
                }
            }
        }
        found.remove(&module);
        imports.insert(module, found);
    }
    // A loop is a path back to where it started; report each set of modules once.
    let mut reported: BTreeSet<BTreeSet<Module>> = BTreeSet::new();
    let mut out = Vec::new();
    for start in imports.keys() {
        if let Some(path) = path_back(start, &imports) {
            let members: BTreeSet<Module> = path.iter().cloned().collect();
            if reported.insert(members) {
                let names: Vec<String> = path.iter().map(|m| m.join("::")).collect();
                out.push(format!("{} -> {}", names.join(" -> "), start.join("::")));
            }
        }
    }
    out
}

/// A path of imports from `start` back to `start`, if there is one (breadth first, so the
/// shortest).
fn path_back(start: &Module, imports: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    let mut came_from: BTreeMap<&Module, &Module> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(at) = queue.pop_front() {
        for next in imports.get(at).into_iter().flatten() {
            if next == start {
                let mut path = vec![at.clone()];
                let mut cursor = at;
                while let Some(&previous) = came_from.get(cursor) {
                    path.push(previous.clone());
                    cursor = previous;
                }
                path.reverse();
                return Some(path);
            }
            if next != start && !came_from.contains_key(next) {
                came_from.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_modules_that_import_each_other_are_a_loop_and_a_chain_is_not() {
        let dir = std::env::temp_dir().join(format!("nuvec-tidy-imports-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("ring")).unwrap();
        fs::write(dir.join("lib.rs"), "mod ring;\nmod tcp;\n").unwrap();
        fs::write(dir.join("tcp.rs"), "pub(crate) struct Link;\n").unwrap();
        fs::write(
            dir.join("ring/mod.rs"),
            "mod a;\nmod b;\nuse crate::tcp::Link;\n",
        )
        .unwrap();
        fs::write(dir.join("ring/a.rs"), "use super::b::Thing;\n").unwrap();
        fs::write(dir.join("ring/b.rs"), "fn f() { crate::tcp::Link; }\n").unwrap();
        assert_eq!(loops(&dir), Vec::<String>::new());
        fs::write(dir.join("ring/b.rs"), "fn f() { super::a::g(); }\n").unwrap();
        let found = loops(&dir);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("ring::a") && found[0].contains("ring::b"),
            "{found:?}"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
