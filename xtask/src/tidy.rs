//! Repository hygiene: files stay one concept long, every `unsafe` block says why it is sound,
//! library code holds no `todo!`, `unimplemented!` or `dbg!`, and every relative link in the
//! Markdown documents (README, CONTRIBUTING, ARCHITECTURE, docs/) names a file that exists;
//! the layered crates' modules import each other in no loop (`tidy_imports.rs`).

use std::fs;
use std::path::{Path, PathBuf};

/// Lines of a library source file above which tidy fails.
const MAX_LINES: usize = 1000;

pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Checks the library sources under `root/crates/*/src`; returns every problem found.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    let mut files = Vec::new();
    let Ok(crates) = fs::read_dir(root.join("crates")) else {
        return Err(format!("no crates folder under {}", root.display()));
    };
    for krate in crates.flatten() {
        rust_files(&krate.path().join("src"), &mut files);
    }
    let mut problems = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        if lines.len() > MAX_LINES {
            problems.push(format!(
                "{shown}: {} lines (more than {MAX_LINES}): split it by concept",
                lines.len()
            ));
        }
        for (index, line) in lines.iter().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for banned in ["todo!(", "unimplemented!(", "dbg!("] {
                if code.contains(banned) {
                    problems.push(format!("{shown}:{}: {banned} in library code", index + 1));
                }
            }
            if code.contains("unsafe {") || code.starts_with("unsafe impl") {
                let window = &lines[index.saturating_sub(4)..index];
                if !window
                    .iter()
                    .chain(std::iter::once(line))
                    .any(|l| l.contains("SAFETY:"))
                {
                    problems.push(format!(
                        "{shown}:{}: unsafe without a `// SAFETY:` comment",
                        index + 1
                    ));
                }
            }
        }
    }
    problems.extend(broken_links(root));
    for src in super::tidy_imports::LAYERED {
        for found in super::tidy_imports::loops(&root.join(src)) {
            problems.push(format!(
                "{src}: modules import each other in a loop: {found}"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The Markdown documents a reader follows links through.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "ARCHITECTURE.md"]
        .iter()
        .map(|name| root.join(name))
        .collect();
    if let Ok(entries) = fs::read_dir(root.join("docs")) {
        files.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "md")),
        );
    }
    files
}

/// The targets of `](target)` links in `text`.
fn link_targets(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            rest.find(')').map(|end| &rest[..end])
        })
        .collect()
}

/// Relative links in the documents whose file does not exist.
fn broken_links(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for document in documents(root) {
        let Ok(text) = fs::read_to_string(&document) else {
            problems.push(format!("{}: missing", document.display()));
            continue;
        };
        let dir = document.parent().unwrap_or(root);
        for target in link_targets(&text) {
            let path = target.split('#').next().unwrap_or(target);
            if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
                continue;
            }
            if !dir.join(path).exists() {
                let shown = document.strip_prefix(root).unwrap_or(&document);
                problems.push(format!(
                    "{}: link to {target} leads nowhere",
                    shown.display()
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    #[test]
    fn links_are_read_from_markdown() {
        let text = "see [a](docs/a.md), [b](https://x.org/b) and [c](c.md#part)";
        assert_eq!(
            super::link_targets(text),
            ["docs/a.md", "https://x.org/b", "c.md#part"]
        );
    }

    #[test]
    fn repository_is_tidy() {
        if let Err(problems) = super::check(&crate::workspace_root()) {
            panic!("tidy found problems:\n{problems}");
        }
    }
}
