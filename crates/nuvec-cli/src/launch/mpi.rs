//! `--backend mpi`: hands the launch to `mpirun`, as mlx.launch does (a hostfile of
//! `host slots=k` lines, `-x` for each variable). The key is passed by name (`-x
//! NUVEC_DISTRIBUTED_KEY`) with its value in mpirun's environment, so it is never on a
//! command line.

use super::hosts::Host;
use super::plan::parse_env;
use super::spawn::KEY_VARIABLE;
use std::path::{Path, PathBuf};

/// `mpirun` on `PATH`.
pub(crate) fn find_mpirun() -> Result<PathBuf, String> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("mpirun"))
        .find(|path| path.is_file())
        .ok_or_else(|| "--backend mpi needs mpirun on PATH (install Open MPI)".into())
}

/// The mpirun hostfile: each host once, with as many slots as it has ranks, in rank order.
pub(crate) fn mpi_hostfile(hosts: &[Host]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for host in hosts {
        match counts.iter_mut().find(|(name, _)| *name == host.ssh) {
            Some((_, count)) => *count += 1,
            None => counts.push((&host.ssh, 1)),
        }
    }
    counts
        .iter()
        .map(|(name, count)| format!("{name} slots={count}\n"))
        .collect()
}

/// The mpirun command line for `command`.
pub(crate) fn mpirun_command(
    mpirun: &Path,
    hostfile: &Path,
    cwd: Option<&Path>,
    env: &[String],
    mpi_args: &[String],
    command: &[String],
) -> Result<Vec<String>, String> {
    let mut line = vec![
        mpirun.to_string_lossy().into_owned(),
        "--output".into(),
        ":raw".into(),
        "--hostfile".into(),
        hostfile.to_string_lossy().into_owned(),
    ];
    if let Some(cwd) = cwd {
        line.extend(["-cwd".into(), cwd.to_string_lossy().into_owned()]);
    }
    for entry in env {
        parse_env(entry)?;
        line.extend(["-x".into(), entry.clone()]);
    }
    line.extend(["-x".into(), KEY_VARIABLE.into()]);
    for arg in mpi_args {
        line.extend(arg.split_whitespace().map(str::to_string));
    }
    line.push("--".into());
    line.extend(command.iter().cloned());
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::hosts::parse_host_list;

    #[test]
    fn hosts_become_slots_in_rank_order() {
        let hosts = parse_host_list("b,a", 2).unwrap();
        assert_eq!(mpi_hostfile(&hosts), "b slots=2\na slots=2\n");
    }

    #[test]
    fn the_key_goes_by_name_only() {
        let line = mpirun_command(
            Path::new("/usr/bin/mpirun"),
            Path::new("/tmp/h"),
            None,
            &["A=1".into()],
            &["--bind-to none".into()],
            &["./prog".into()],
        )
        .unwrap();
        assert_eq!(
            line.join(" "),
            "/usr/bin/mpirun --output :raw --hostfile /tmp/h -x A=1 -x NUVEC_DISTRIBUTED_KEY --bind-to none -- ./prog"
        );
    }
}
