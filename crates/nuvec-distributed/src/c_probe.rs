//! For the ABI tests: compile a small C program against a system header, run it, and read the
//! `name value` lines it prints, so hand-written declarations are checked against the header.

use std::collections::HashMap;
use std::process::Command;

/// What `program`, compiled with `compiler`, printed, by name. When it cannot be compiled,
/// fails if `required` (a variable name) is set, else says the test `test` skipped and how to
/// get the header (`install`), and returns `None`.
pub(crate) fn c_values(
    test: &str,
    compiler: &str,
    program: &str,
    required: &str,
    install: &str,
) -> Option<HashMap<String, i64>> {
    let dir = std::env::temp_dir().join(format!("nuvec-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (source, binary) = (dir.join("abi.c"), dir.join("abi"));
    std::fs::write(&source, program).unwrap();
    let compiled = Command::new(compiler)
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .output();
    let failure = match &compiled {
        Ok(output) if output.status.success() => None,
        Ok(output) => Some(String::from_utf8_lossy(&output.stderr).into_owned()),
        Err(e) => Some(format!("{compiler} cannot run: {e}")),
    };
    if let Some(why) = failure {
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            std::env::var_os(required).is_none(),
            "{test}: the probe does not compile but {required} is set ({install}):\n{why}"
        );
        // Straight to stderr: the harness would hide `eprintln!` of a passing test.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: the probe does not compile ({install})"
        );
        return None;
    }
    let output = Command::new(&binary)
        .output()
        .expect("running the ABI probe");
    let _ = std::fs::remove_dir_all(&dir);
    Some(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| {
                let (name, value) = line.split_once(' ')?;
                Some((name.to_string(), value.trim().parse().ok()?))
            })
            .collect(),
    )
}
