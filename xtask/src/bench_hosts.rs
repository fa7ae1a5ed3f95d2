//! `bench-distributed --hostfile FILE`: the ranks of mlx.launch's hostfile (a list of
//! `{"ssh", "ips"}` hosts) instead of 2 and 4 ranks on loopback. `nuvec launch` reads the file
//! (`--print-hostfile` says where each rank runs and the ring's addresses), starts nuvec's
//! ranks and reaches other hosts over ssh; MLX's ranks start directly when every host is this
//! machine, else through MLX's own `mlx.launch`. Every host needs the repository, built, at
//! the same path (and `.venv-mlx` for the MLX side), as mlx.launch expects.

use crate::stdout_of;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The hosts of a hostfile, as `nuvec launch` reads them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Hosts {
    pub(crate) file: PathBuf,
    /// How many ranks the file starts.
    pub(crate) ranks: usize,
    /// Whether every rank runs on this machine (no ssh).
    pub(crate) local: bool,
}

/// What `nuvec launch --print-hostfile` printed for a launch of `file` whose ring starts at
/// `port`.
fn plan(root: &Path, file: &Path, port: u16) -> Result<String, String> {
    let mut command = Command::new(root.join("target/release/nuvec"));
    command
        .args(["launch", "--backend", "ring", "--print-hostfile", "-p"])
        .arg(port.to_string())
        .arg("--hostfile")
        .arg(file)
        .args(["--", "true"]);
    let failed = format!("nuvec launch cannot use the hostfile {}", file.display());
    let stdout = stdout_of(&mut command, "nuvec launch --print-hostfile", &failed)?;
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// Reads `file` through `nuvec launch`.
pub(crate) fn read(root: &Path, file: &Path) -> Result<Hosts, String> {
    let ranks = parse_ranks(&plan(root, file, 32323)?)?;
    Ok(Hosts {
        file: file.to_path_buf(),
        ranks: ranks.len(),
        local: ranks.iter().all(|&local| local),
    })
}

/// Whether each rank of a printed plan runs here (`rank R on HOST (local)`).
fn parse_ranks(plan: &str) -> Result<Vec<bool>, String> {
    let ranks: Vec<bool> = plan
        .lines()
        .filter(|line| line.starts_with("rank "))
        .map(|line| line.trim_end().ends_with("(local)"))
        .collect();
    if ranks.len() < 2 {
        return Err(format!(
            "the hostfile starts {} rank(s); a benchmark needs at least 2",
            ranks.len()
        ));
    }
    Ok(ranks)
}

/// The ring's addresses for a launch of `hosts` from `port` (MLX_HOSTFILE's JSON).
pub(crate) fn ring_addresses(root: &Path, hosts: &Hosts, port: u16) -> Result<String, String> {
    parse_addresses(&plan(root, &hosts.file, port)?)
}

/// The MLX_HOSTFILE list of a printed plan (the same on every rank).
fn parse_addresses(plan: &str) -> Result<String, String> {
    plan.lines()
        .find_map(|line| line.trim().strip_prefix("MLX_HOSTFILE=<file> "))
        .map(str::to_string)
        .ok_or_else(|| "nuvec launch printed no ring addresses".to_string())
}

/// `mlx.launch` of the rank program `script` on `hosts` (some of them remote), its ring from
/// `port`, with `python` on every host.
pub(crate) fn mlx_launch(
    python: &Path,
    hosts: &Hosts,
    port: u16,
    script: &Path,
    backend: &str,
) -> Command {
    let launcher = python.with_file_name("mlx.launch");
    let mut command = Command::new(launcher);
    command
        .arg("--hostfile")
        .arg(&hosts.file)
        .args(["--backend", backend, "--starting-port", &port.to_string()])
        .arg("--python")
        .arg(python)
        .arg("--")
        .arg(script);
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "rank 0 on localhost (local)\n  MLX_RANK=0\n  MLX_HOSTFILE=<file> [[\"127.0.0.1:40000\"], [\"10.0.0.2:40001\"]]\nrank 1 on 10.0.0.2\n  MLX_RANK=1\n  MLX_HOSTFILE=<file> [[\"127.0.0.1:40000\"], [\"10.0.0.2:40001\"]]\n";

    #[test]
    fn a_plan_says_which_ranks_run_here_and_the_ring_s_addresses() {
        assert_eq!(parse_ranks(PLAN), Ok(vec![true, false]));
        assert_eq!(
            parse_addresses(PLAN).as_deref(),
            Ok(r#"[["127.0.0.1:40000"], ["10.0.0.2:40001"]]"#)
        );
    }

    #[test]
    fn a_hostfile_of_one_rank_is_refused() {
        let error = parse_ranks("rank 0 on localhost (local)\n").unwrap_err();
        assert!(error.contains("at least 2"), "{error}");
    }

    #[test]
    fn remote_mlx_ranks_start_through_mlx_launch_with_the_same_python() {
        let hosts = Hosts {
            file: "hosts.json".into(),
            ranks: 2,
            local: false,
        };
        let command = mlx_launch(
            Path::new("/r/.venv-mlx/bin/python"),
            &hosts,
            40000,
            Path::new("b.py"),
            "ring",
        );
        assert_eq!(command.get_program(), "/r/.venv-mlx/bin/mlx.launch");
        let args: Vec<_> = command.get_args().collect();
        assert_eq!(
            args,
            [
                "--hostfile",
                "hosts.json",
                "--backend",
                "ring",
                "--starting-port",
                "40000",
                "--python",
                "/r/.venv-mlx/bin/python",
                "--",
                "b.py"
            ]
        );
        let jaccl = mlx_launch(
            Path::new("/r/.venv-mlx/bin/python"),
            &hosts,
            40000,
            Path::new("b.py"),
            "jaccl-ring",
        );
        let args: Vec<_> = jaccl.get_args().collect();
        assert_eq!(args[2..4], ["--backend", "jaccl-ring"]);
    }
}
