//! `nuvec config`: `mlx.distributed_config` for nuvec. It checks every host over ssh (reachable,
//! the same nuvec, clocks, the key), discovers how the hosts are joined (Thunderbolt cables
//! on macOS; on any host, the networks they share, each link measured by nuvec's own probe),
//! finds a ring or a full mesh, sets up Thunderbolt networking when asked, prints the
//! topology as DOT, and writes the hostfile `mlx.launch` and `nuvec launch` both read.

mod ethernet;
mod facts;
mod hostfile;
mod linux;
mod macos;
pub(crate) mod probe;
mod remote;
mod thunderbolt;
mod topology;

use facts::{HostFacts, Platform};
use remote::Remote;
use std::path::PathBuf;

/// How the hosts are joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Over {
    Thunderbolt,
    Ethernet,
}

/// The backend the hostfile is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Backend {
    Ring,
    Jaccl,
    #[value(name = "jaccl-ring")]
    JacclRing,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Ring => "ring",
            Backend::Jaccl => "jaccl",
            Backend::JacclRing => "jaccl-ring",
        }
    }
}

/// `nuvec config [options]`
#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ConfigArgs {
    /// Comma-separated hosts to ssh into.
    #[arg(long, default_value = "127.0.0.1")]
    hosts: String,
    /// An mlx.launch hostfile naming the hosts (its "ssh" names are used).
    #[arg(long)]
    hostfile: Option<PathBuf>,
    /// Leave out hosts that cannot be reached over ssh instead of stopping.
    #[arg(long = "ignore-unreachable")]
    ignore_unreachable: bool,
    /// What joins the hosts: Thunderbolt cables (macOS) or networks they share, each link
    /// measured.
    #[arg(long, value_enum, default_value = "thunderbolt")]
    over: Over,
    /// The backend to write the hostfile for (default: jaccl on a full mesh with RDMA,
    /// jaccl-ring on a ring with RDMA, ring otherwise).
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// Run the setup commands on the hosts (needs password-less sudo) after printing them.
    #[arg(long = "auto-setup", overrides_with = "no_auto_setup")]
    auto_setup: bool,
    /// Only print the setup commands (the default; without a terminal nothing waits).
    #[arg(long = "no-auto-setup", overrides_with = "auto_setup")]
    no_auto_setup: bool,
    /// Print the topology in GraphViz's DOT language and exit.
    #[arg(long)]
    dot: bool,
    /// Write the hostfile here (otherwise it is printed).
    #[arg(long = "output-hostfile", visible_alias = "output")]
    output_hostfile: Option<PathBuf>,
    /// K=V for the hostfile's "envs", set for every rank by the launchers (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// Say what is run on each host.
    #[arg(long)]
    verbose: bool,
    /// The ssh command, split on spaces (e.g. "ssh -F my_config").
    #[arg(long, default_value = "ssh")]
    ssh: String,
    /// The nuvec command on the hosts (default: this program's path, the same on every host).
    #[arg(long)]
    nuvec: Option<String>,
    /// Bytes each link probe sends.
    #[arg(long = "probe-bytes", default_value_t = 16 << 20)]
    probe_bytes: u64,
}

const EXAMPLES: &str = "\
Examples:
  nuvec config --over ethernet --hosts node1,node2,node3 --output-hostfile hosts.json
      measure every link the hosts share and write a ring hostfile over the fastest
  nuvec config --over thunderbolt --hosts mac1,mac2,mac3,mac4 --dot > cables.dot
      draw the Thunderbolt cabling (dot -Tpng cables.dot)
  nuvec config --over thunderbolt --backend jaccl --hosts mac1,mac2,mac3,mac4 --auto-setup \\
      --output-hostfile jaccl.json
      set up each cable's network and write a JACCL hostfile

Then: nuvec launch --hostfile hosts.json -- ./my-program. See docs/config.md.";

/// What every step works with.
struct Session {
    args: ConfigArgs,
    remote: Remote,
    names: Vec<String>,
    facts: Vec<HostFacts>,
    nuvec: String,
}

impl Session {
    fn log(&self, message: &str) {
        if self.args.verbose {
            eprintln!("[nuvec config] {message}");
        }
    }

    /// Writes the hostfile, or prints it under a heading.
    fn save(&self, backend: &str, hosts: &[hostfile::HostEntry]) -> Result<(), String> {
        let text = hostfile::render(backend, &self.args.env, hosts);
        match &self.args.output_hostfile {
            Some(path) => {
                std::fs::write(path, &text)
                    .map_err(|e| format!("writing the hostfile {}: {e}", path.display()))?;
                eprintln!(
                    "Wrote {} ({} hosts{}).",
                    path.display(),
                    hosts.len(),
                    if backend.is_empty() {
                        String::new()
                    } else {
                        format!(", backend {backend}")
                    }
                );
            }
            None => print!("Hostfile\n========\n{text}"),
        }
        Ok(())
    }
}

fn warn(message: &str) {
    eprintln!("nuvec config: warning: {message}");
}

/// The hosts' ssh names, from the hostfile or the list, each once.
fn host_names(args: &ConfigArgs) -> Result<Vec<String>, String> {
    let (names, source) = match &args.hostfile {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading the hostfile {}: {e}", path.display()))?;
            let parsed = crate::launch::hosts::parse_launch_hostfile(&text)
                .map_err(|e| format!("the hostfile {}: {e}", path.display()))?;
            let names: Vec<String> = parsed.hosts.into_iter().map(|h| h.ssh).collect();
            (names, format!("the hostfile {}", path.display()))
        }
        None => {
            let names: Vec<String> = args
                .hosts
                .split(',')
                .map(|h| h.trim().to_string())
                .collect();
            if names.iter().any(String::is_empty) {
                return Err(format!("--hosts {:?} has an empty host name", args.hosts));
            }
            (names, "--hosts".to_string())
        }
    };
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = names.iter().find(|n| !seen.insert(n.as_str())) {
        return Err(format!(
            "{source} names {twice} twice; nuvec config configures each machine once (ranks \
             per host are nuvec launch's -n)"
        ));
    }
    Ok(names)
}

/// Step 1: every host answers, runs this nuvec, and has the key if this machine has one.
fn check_hosts(
    args: &ConfigArgs,
    remote: &Remote,
    names: Vec<String>,
    nuvec: &str,
) -> Result<(Vec<String>, Vec<HostFacts>), String> {
    if args.verbose {
        eprintln!("[nuvec config] checking ssh access to {}", names.join(", "));
    }
    let answers = facts::gather(remote, &names, nuvec);
    let mut reachable = (Vec::new(), Vec::new());
    let mut unreachable = Vec::new();
    for (name, answer) in names.into_iter().zip(answers) {
        match answer {
            Ok(facts) => {
                reachable.0.push(name);
                reachable.1.push(facts);
            }
            Err(reason) => unreachable.push(reason),
        }
    }
    if !unreachable.is_empty() {
        let list = unreachable.join("\n  - ");
        if !args.ignore_unreachable {
            return Err(format!(
                "could not check every host:\n  - {list}\n(--ignore-unreachable leaves them out)"
            ));
        }
        warn(&format!(
            "leaving out hosts that did not answer:\n  - {list}"
        ));
    }
    let (names, facts) = reachable;
    if names.is_empty() {
        return Err("no host is left to configure".into());
    }
    let ours = format!("nuvec {}", env!("CARGO_PKG_VERSION"));
    let mismatched: Vec<String> = names
        .iter()
        .zip(&facts)
        .filter(|(_, f)| f.version.as_deref() != Some(ours.as_str()))
        .map(|(name, f)| match &f.version {
            Some(version) => format!("{name} runs {version}"),
            None => format!("{name} has no nuvec at {nuvec}"),
        })
        .collect();
    if !mismatched.is_empty() {
        return Err(format!(
            "every host needs this nuvec ({ours}): {} (install it there, or name its path on the \
             hosts with --nuvec)",
            mismatched.join("; ")
        ));
    }
    for (name, f) in names.iter().zip(&facts) {
        if f.clock_offset_s.abs() > 2.0 {
            warn(&format!(
                "{name}'s clock is {:+.1} s from this machine's: logs from the hosts will not line \
                 up (nuvec's timeouts do not depend on it)",
                f.clock_offset_s
            ));
        }
    }
    let key_here =
        std::env::var_os(crate::launch::spawn::KEY_VARIABLE).is_some_and(|k| !k.is_empty());
    if key_here {
        let without: Vec<&str> = names
            .iter()
            .zip(&facts)
            .filter(|(_, f)| !f.key_set)
            .map(|(n, _)| n.as_str())
            .collect();
        if !without.is_empty() {
            return Err(format!(
                "{} is set here but not on {} (programs started there without nuvec launch \
                 could not join; its value is not shown)",
                crate::launch::spawn::KEY_VARIABLE,
                without.join(", ")
            ));
        }
    }
    Ok((names, facts))
}

/// Runs `nuvec config`; the exit status.
pub(crate) fn run(args: ConfigArgs) -> Result<i32, String> {
    for entry in &args.env {
        crate::launch::plan::parse_env(entry)?;
    }
    if args.probe_bytes == 0 {
        return Err("--probe-bytes must be at least 1".into());
    }
    let ssh: Vec<String> = args.ssh.split_whitespace().map(String::from).collect();
    if ssh.is_empty() {
        return Err("--ssh is empty".into());
    }
    let remote = Remote {
        ssh,
        verbose: args.verbose,
    };
    let nuvec = match &args.nuvec {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("finding this program's path: {e}"))?
            .to_string_lossy()
            .into_owned(),
    };
    let names = host_names(&args)?;
    let (names, facts) = check_hosts(&args, &remote, names, &nuvec)?;
    let session = Session {
        args,
        remote,
        names,
        facts,
        nuvec,
    };
    session.log("every host answered and runs this nuvec");
    match session.args.over {
        Over::Ethernet => ethernet::configure(&session)?,
        Over::Thunderbolt => {
            if let Some(i) = session
                .facts
                .iter()
                .position(|f| f.platform != Platform::MacOs)
            {
                return Err(format!(
                    "{} runs Linux: Thunderbolt discovery reads macOS's system_profiler; use \
                     --over ethernet there (it finds and measures every link the hosts share, \
                     Thunderbolt networking included)",
                    session.names[i]
                ));
            }
            thunderbolt::configure(&session)?
        }
    }
    Ok(0)
}
