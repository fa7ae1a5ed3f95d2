//! Repository hygiene: files stay one concept long, every `unsafe` block says why it is sound,
//! and library code holds no `todo!`, `unimplemented!` or `dbg!`.

use std::fs;
use std::path::{Path, PathBuf};

/// Lines of a library source file above which tidy fails.
const MAX_LINES: usize = 1000;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
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
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn repository_is_tidy() {
        if let Err(problems) = super::check(&crate::workspace_root()) {
            panic!("tidy found problems:\n{problems}");
        }
    }
}
