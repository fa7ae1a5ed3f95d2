//! `--backend mpi`: hands the launch to `mpirun`, as mlx.launch does (a hostfile of
//! `host slots=k` lines, `-x` for each variable). The key is passed by name (`-x
//! NUVEC_DISTRIBUTED_KEY`) with its value in mpirun's environment, so it is never on a
//! command line.
//!
//! Unlike mlx.launch, the command works with Open MPI 4 (which has no `--output :raw`) as well
//! as 5: it asks `mpirun --version` which one it is. When every rank is on this machine it
//! keeps MPI on shared memory and loopback, and as root (containers) it passes Open MPI's
//! `--allow-run-as-root`.

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

/// What the launcher knows about the mpirun it drives and the ranks it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flavor {
    /// Open MPI's major version; `None` when `mpirun --version` does not name Open MPI
    /// (then no Open MPI option is passed).
    pub(crate) open_mpi: Option<u32>,
    /// Every rank runs on this machine.
    pub(crate) local: bool,
    /// More ranks run on this machine than it has cores.
    pub(crate) oversubscribed: bool,
    /// The launcher runs as root.
    pub(crate) root: bool,
    /// Ask Open MPI to tag each output line with its rank (the launcher turns the tags into
    /// its `[rank] ` prefixes).
    pub(crate) tag_output: bool,
}

/// Open MPI's major version from `mpirun --version` output ("mpirun (Open MPI) 4.1.4").
pub(crate) fn open_mpi_major(version_output: &str) -> Option<u32> {
    let line = version_output.lines().find(|l| l.contains("Open MPI"))?;
    let version = line.rsplit(' ').next()?;
    version.split('.').next()?.trim().parse().ok()
}

/// Asks `mpirun --version` which MPI it is.
pub(crate) fn probe(mpirun: &Path) -> Option<u32> {
    let output = std::process::Command::new(mpirun)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    open_mpi_major(&String::from_utf8_lossy(&output.stdout))
}

/// The MCA parameters named in `args` (`--mca NAME VALUE` or `-mca NAME VALUE`).
fn mca_names(args: &[String]) -> Vec<String> {
    let tokens: Vec<&str> = args.iter().flat_map(|a| a.split_whitespace()).collect();
    tokens
        .windows(2)
        .filter(|pair| pair[0] == "--mca" || pair[0] == "-mca")
        .map(|pair| pair[1].to_string())
        .collect()
}

/// The options that follow from `flavor`, leaving out any MCA parameter the user sets
/// (`taken`): Open MPI refuses a parameter given twice, and the user's choice wins.
fn flavor_args(flavor: Flavor, taken: &[String]) -> Vec<String> {
    let Some(major) = flavor.open_mpi else {
        return Vec::new();
    };
    let mut args = Vec::new();
    if flavor.root {
        args.push("--allow-run-as-root".to_string());
    }
    if flavor.tag_output {
        // Open MPI 5 replaced `--tag-output` with `--output tag`.
        if major >= 5 {
            args.extend(["--output".to_string(), "tag".to_string()]);
        } else {
            args.push("--tag-output".to_string());
        }
    }
    let mut mca = |name: &str, value: String| {
        if !taken.iter().any(|t| t == name) {
            args.extend(["--mca".to_string(), name.to_string(), value]);
        }
    };
    if flavor.local {
        // Shared memory between local ranks (Open MPI 5 renamed `vader` to `sm`), and TCP only
        // on loopback: containers often have interfaces that lead nowhere.
        let shared_memory = if major >= 5 { "sm" } else { "vader" };
        mca("btl", format!("self,{shared_memory},tcp"));
        mca("btl_tcp_if_include", "lo".into());
        if major < 5 {
            mca("oob_tcp_if_include", "lo".into());
        }
    }
    if flavor.oversubscribed {
        // Open MPI spins while it waits unless it knows ranks share cores, and the hostfile
        // gives it a slot per rank, so it does not; spinning ranks on shared cores make small
        // all-reduces far slower (measured: `docs/performance.md`, "Tuning measurements").
        mca("mpi_yield_when_idle", "1".into());
    }
    args
}

/// The mpirun command line for `command`.
pub(crate) fn mpirun_command(
    mpirun: &Path,
    flavor: Flavor,
    hostfile: &Path,
    cwd: Option<&Path>,
    env: &[String],
    mpi_args: &[String],
    command: &[String],
) -> Result<Vec<String>, String> {
    let mut line = vec![
        mpirun.to_string_lossy().into_owned(),
        "--hostfile".into(),
        hostfile.to_string_lossy().into_owned(),
    ];
    line.extend(flavor_args(flavor, &mca_names(mpi_args)));
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
            Flavor::default(),
            Path::new("/tmp/h"),
            None,
            &["A=1".into()],
            &["--bind-to none".into()],
            &["./prog".into()],
        )
        .unwrap();
        assert_eq!(
            line.join(" "),
            "/usr/bin/mpirun --hostfile /tmp/h -x A=1 -x NUVEC_DISTRIBUTED_KEY --bind-to none -- ./prog"
        );
    }

    #[test]
    fn open_mpi_versions_are_read_from_mpirun_version() {
        assert_eq!(
            open_mpi_major("mpirun (Open MPI) 4.1.4\n\nReport bugs to ..."),
            Some(4)
        );
        assert_eq!(open_mpi_major("mpirun (Open MPI) 5.0.3\n"), Some(5));
        assert_eq!(
            open_mpi_major("HYDRA build details:\n    Version: 4.1"),
            None
        );
    }

    fn line_for(flavor: Flavor) -> String {
        mpirun_command(
            Path::new("mpirun"),
            flavor,
            Path::new("h"),
            None,
            &[],
            &[],
            &["p".into()],
        )
        .unwrap()
        .join(" ")
    }

    #[test]
    fn local_open_mpi_4_and_5_launches_stay_on_shared_memory_and_loopback() {
        let local = |major| Flavor {
            open_mpi: Some(major),
            local: true,
            oversubscribed: false,
            root: false,
            tag_output: false,
        };
        assert_eq!(
            line_for(local(4)),
            "mpirun --hostfile h --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x NUVEC_DISTRIBUTED_KEY -- p"
        );
        assert_eq!(
            line_for(local(5)),
            "mpirun --hostfile h --mca btl self,sm,tcp --mca btl_tcp_if_include lo -x NUVEC_DISTRIBUTED_KEY -- p"
        );
        let remote_root = Flavor {
            open_mpi: Some(4),
            local: false,
            oversubscribed: false,
            root: true,
            tag_output: false,
        };
        assert_eq!(
            line_for(remote_root),
            "mpirun --hostfile h --allow-run-as-root -x NUVEC_DISTRIBUTED_KEY -- p"
        );
        // No Open MPI option goes to an mpirun that is not Open MPI's.
        let other = Flavor {
            open_mpi: None,
            local: true,
            oversubscribed: false,
            root: true,
            tag_output: false,
        };
        assert_eq!(
            line_for(other),
            "mpirun --hostfile h -x NUVEC_DISTRIBUTED_KEY -- p"
        );
    }

    #[test]
    fn open_mpi_tags_output_lines_with_each_version_s_option() {
        let tagged = |major| Flavor {
            open_mpi: Some(major),
            local: false,
            oversubscribed: false,
            root: false,
            tag_output: true,
        };
        assert_eq!(
            line_for(tagged(4)),
            "mpirun --hostfile h --tag-output -x NUVEC_DISTRIBUTED_KEY -- p"
        );
        assert_eq!(
            line_for(tagged(5)),
            "mpirun --hostfile h --output tag -x NUVEC_DISTRIBUTED_KEY -- p"
        );
    }

    #[test]
    fn more_local_ranks_than_cores_make_open_mpi_yield_while_it_waits() {
        let crowded = Flavor {
            open_mpi: Some(5),
            local: true,
            oversubscribed: true,
            root: false,
            tag_output: false,
        };
        assert_eq!(
            line_for(crowded),
            "mpirun --hostfile h --mca btl self,sm,tcp --mca btl_tcp_if_include lo --mca mpi_yield_when_idle 1 -x NUVEC_DISTRIBUTED_KEY -- p"
        );
    }

    #[test]
    fn mca_parameters_the_user_sets_replace_the_launcher_s_own() {
        let local = Flavor {
            open_mpi: Some(4),
            local: true,
            oversubscribed: false,
            root: false,
            tag_output: false,
        };
        let line = mpirun_command(
            Path::new("mpirun"),
            local,
            Path::new("h"),
            None,
            &[],
            &["--mca btl self,tcp --mca mpi_yield_when_idle 1".into()],
            &["p".into()],
        )
        .unwrap()
        .join(" ");
        assert_eq!(
            line,
            "mpirun --hostfile h --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x NUVEC_DISTRIBUTED_KEY --mca btl self,tcp --mca mpi_yield_when_idle 1 -- p"
        );
    }
}
