//! Starting one rank: locally as the leader of its own process group (so ending it ends its
//! children too), or on another host through ssh with a small bash wrapper that does the same
//! there and receives the key on its standard input, never on a command line.

use super::plan::RankPlan;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Where a rank's secret goes: the environment of local ranks, the first stdin line of remote ones.
pub(crate) const KEY_VARIABLE: &str = "NUVEC_DISTRIBUTED_KEY";
/// The first stdout line of a remote wrapper: the process group of the rank on its host.
pub(crate) const PGID_LINE: &str = "NUVEC_LAUNCH_PGID=";

/// What every rank of a launch shares.
#[derive(Clone, Debug)]
pub(crate) struct Context {
    pub(crate) command: Vec<String>,
    pub(crate) cwd: PathBuf,
    pub(crate) key: String,
    /// The launcher's private temporary directory (local ranks' files).
    pub(crate) files: PathBuf,
    /// The ssh command and its options, e.g. `["ssh"]` or `["ssh", "-F", "config"]`.
    pub(crate) ssh: Vec<String>,
    /// Print each rank's command before starting it (`--verbose`).
    pub(crate) verbose: bool,
}

/// ssh's options for a rank: never ask for a password, give up connecting after 10 s.
pub(crate) const SSH_OPTIONS: [&str; 4] = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"];

/// Quotes `text` for a POSIX shell.
pub(crate) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The bash script a remote rank runs: it reads the key from stdin, exports the rank's
/// environment, writes its files to a private temporary directory (removed on exit), starts
/// the command as the leader of a new process group, reports that group, and exits with the
/// command's status.
pub(crate) fn remote_script(plan: &RankPlan, context: &Context) -> String {
    let mut script = String::from("IFS= read -r NUVEC_DISTRIBUTED_KEY || exit 97\n");
    script += "export NUVEC_DISTRIBUTED_KEY\n";
    let cwd = shell_quote(&context.cwd.to_string_lossy());
    script += &format!(
        "cd {cwd} || {{ echo \"nuvec launch: no directory {cwd} on $(hostname)\" >&2; exit 1; }}\n"
    );
    script += "tmp=$(mktemp -d) || exit 1\ntrap 'rm -rf \"$tmp\"' EXIT\n";
    for (key, value) in &plan.env {
        if key != "MLX_RANK" {
            script += &format!("export {key}={}\n", shell_quote(value));
        }
    }
    for (key, contents) in &plan.files {
        script += &format!(
            "printf '%s' {} > \"$tmp/{key}\"\nexport {key}=\"$tmp/{key}\"\n",
            shell_quote(contents)
        );
    }
    script += &format!("export MLX_RANK={}\n", plan.rank);
    let command: Vec<String> = context.command.iter().map(|a| shell_quote(a)).collect();
    script += "set -m\n";
    script += &format!("{} <&0 &\n", command.join(" "));
    script += &format!("pid=$!\nset +m\necho \"{PGID_LINE}$pid\"\n");
    script += "wait \"$pid\"\nexit $?\n";
    script
}

fn write_files(plan: &RankPlan, dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    plan.files
        .iter()
        .map(|(key, contents)| {
            let path = dir.join(format!("rank{}-{key}.json", plan.rank));
            std::fs::write(&path, contents)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            Ok((key.clone(), path))
        })
        .collect()
}

/// What `--verbose` shows of rank `plan.rank`'s start: its environment (never the key) and
/// command, and for a remote rank the ssh command that runs them through the wrapper.
pub(crate) fn describe(plan: &RankPlan, context: &Context) -> String {
    let mut words: Vec<String> = plan
        .env
        .iter()
        .map(|(k, v)| format!("{k}={}", shell_quote(v)))
        .collect();
    words.extend(plan.files.iter().map(|(k, _)| format!("{k}=<file>")));
    words.extend(context.command.iter().map(|a| shell_quote(a)));
    let cwd = context.cwd.display();
    if plan.host.is_local() {
        format!("rank {} (local, in {cwd}): {}", plan.rank, words.join(" "))
    } else {
        let mut ssh = context.ssh.clone();
        ssh.extend(SSH_OPTIONS.iter().map(|o| o.to_string()));
        ssh.push(plan.host.ssh.clone());
        format!(
            "rank {} on {}: {} bash -c <wrapper: key on stdin, cd {cwd}, then> {}",
            plan.rank,
            plan.host.ssh,
            ssh.join(" "),
            words.join(" ")
        )
    }
}

/// Starts rank `plan.rank` with piped stdin, stdout and stderr.
pub(crate) fn start(plan: &RankPlan, context: &Context) -> Result<Child, String> {
    use std::os::unix::process::CommandExt;
    let rank = plan.rank;
    if context.verbose {
        eprintln!("[nuvec launch] {}", describe(plan, context));
    }
    let mut command = if plan.host.is_local() {
        let mut command = Command::new(&context.command[0]);
        command
            .args(&context.command[1..])
            .current_dir(&context.cwd)
            .envs(plan.env.iter().map(|(k, v)| (k, v)))
            .envs(write_files(plan, &context.files)?)
            .env(KEY_VARIABLE, &context.key);
        command
    } else {
        let mut command = Command::new(&context.ssh[0]);
        command
            .args(&context.ssh[1..])
            .args(SSH_OPTIONS)
            .arg(&plan.host.ssh)
            .arg(format!(
                "bash -c {}",
                shell_quote(&remote_script(plan, context))
            ));
        command
    };
    command
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            let program = command.get_program().to_string_lossy().into_owned();
            format!("starting rank {rank} ({program}): {e}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::hosts::Host;

    #[test]
    fn quoting_survives_any_text() {
        let quoted = shell_quote("it's $HOME `x`");
        let output = Command::new("sh")
            .args(["-c", &format!("printf '%s' {quoted}")])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(output.stdout).unwrap(), "it's $HOME `x`");
    }

    #[test]
    fn the_remote_script_never_contains_the_key() {
        let plan = RankPlan {
            rank: 1,
            host: Host {
                ssh: "mac2".into(),
                ips: vec!["10.0.0.2".into()],
                rdma: vec![],
            },
            env: vec![("A".into(), "x y".into()), ("MLX_RANK".into(), "1".into())],
            files: vec![(
                "MLX_HOSTFILE".into(),
                "[[\"10.0.0.1:1\"], [\"10.0.0.2:2\"]]".into(),
            )],
        };
        let context = Context {
            command: vec!["./train".into(), "--lr".into(), "1e-3".into()],
            cwd: "/work dir".into(),
            key: "topsecret-topsecret".into(),
            files: "/tmp".into(),
            ssh: vec!["ssh".into()],
            verbose: true,
        };
        let script = remote_script(&plan, &context);
        let shown = describe(&plan, &context);
        assert!(!script.contains("topsecret") && !shown.contains("topsecret"));
        assert!(
            shown.contains("ssh -o BatchMode=yes -o ConnectTimeout=10 mac2 bash -c"),
            "{shown}"
        );
        assert!(shown.contains("'./train' '--lr' '1e-3'"), "{shown}");
        assert!(script.contains("export A='x y'"));
        assert!(script.contains("export MLX_RANK=1"));
        assert!(script.contains("'./train' '--lr' '1e-3' <&0 &"));
    }
}
