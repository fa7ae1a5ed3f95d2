//! `nuvec launch`: mlx.launch's options and per-rank environment, with a real exit status,
//! process-group cleanup, rank-prefixed line output, no busy loop, a port check before start,
//! and a fresh pre-shared key for every launch unless one is set.

pub(crate) mod hosts;
mod mpi;
mod output;
pub(crate) mod plan;
pub(crate) mod spawn;
mod supervise;

use hosts::{parse_host_list, parse_launch_hostfile, Host};
use plan::{parse_env, plan, LaunchBackend, PlanOptions, RankPlan};
use spawn::{Context, KEY_VARIABLE};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// `nuvec launch [options] -- COMMAND [ARGS…]`
#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
pub(crate) struct LaunchArgs {
    /// Comma-separated hosts (default 127.0.0.1). An IP address is also that host's ring
    /// address; `localhost` listens on 127.0.0.1; other names are reached with ssh and need
    /// --hostfile for their addresses.
    #[arg(long)]
    hosts: Option<String>,
    /// Start each host this many times, one after the other: `-n 4` is 4 ranks on this
    /// machine; `--hosts a,b -n 2` is ranks 0,1 on a and 2,3 on b.
    #[arg(short = 'n', long = "repeat-hosts", value_parser = clap::value_parser!(u32).range(1..))]
    repeat_hosts: Option<u32>,
    /// mlx.launch's hostfile: a list of {"ssh", "ips", "rdma"} hosts, or
    /// {"backend", "envs", "hosts"}.
    #[arg(long)]
    hostfile: Option<PathBuf>,
    /// ring, jaccl, jaccl-ring, mpi or nccl (default: the hostfile's, else ring).
    #[arg(long)]
    backend: Option<String>,
    /// K=V exported to every rank (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// Directory the ranks start in (default: this one).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// First port of the ring's addresses (one per rank, IP and connection), or the JACCL
    /// coordinator's port.
    #[arg(short = 'p', long = "starting-port", default_value_t = 32323,
          value_parser = clap::value_parser!(u16).range(1..))]
    starting_port: u16,
    /// Ring addresses per IP per rank.
    #[arg(long = "connections-per-ip", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    connections_per_ip: u32,
    /// The interpreter for a script: a command that is a file and not an executable program
    /// (a `.py` file, say) runs as `PYTHON SCRIPT` (mlx.launch's --python; default python3).
    #[arg(long)]
    python: Option<String>,
    /// Print the interpreter --python names (or python3's path) and exit.
    #[arg(long = "print-python")]
    print_python: bool,
    /// Do not check that the command exists on this machine before starting (for hosts set up
    /// differently from this one).
    #[arg(long = "no-verify-script")]
    no_verify_script: bool,
    /// NCCL's port on rank 0's host (mlx.launch's --nccl-port; --backend nccl; 12345 when
    /// absent).
    #[arg(long = "nccl-port", value_parser = clap::value_parser!(u16).range(1..))]
    nccl_port: Option<u16>,
    /// Log what the launcher does (each rank's command, ssh's included); the ring also gets
    /// MLX_RING_VERBOSE=1.
    #[arg(long)]
    verbose: bool,
    /// Extra arguments for mpirun (--backend mpi; repeatable).
    #[arg(long = "mpi-arg", allow_hyphen_values = true)]
    mpi_arg: Vec<String>,
    /// Do not prefix output lines with `[rank] `.
    #[arg(long = "no-prefix")]
    no_prefix: bool,
    /// Print what each rank would get (host, environment, files) and exit without running.
    #[arg(long = "print-hostfile")]
    print_hostfile: bool,
    /// The ssh command for remote hosts, split on spaces (e.g. "ssh -F my_config").
    #[arg(long, default_value = "ssh")]
    ssh: String,
    /// Seconds ranks get to end after SIGTERM before SIGKILL.
    #[arg(long, default_value_t = 5.0)]
    grace: f64,
    /// When a rank fails, let the others run on rather than ending them (a group's server
    /// then answers 503 and reports the loss on /health); the launcher still exits with the
    /// first failing rank's status once every rank has ended.
    #[arg(long)]
    keep_going: bool,
    /// The program and its arguments (after `--`, or after the last option).
    #[arg(trailing_var_arg = true)]
    command: Vec<String>,
}

/// `nuvec launch --help`'s closing section.
const EXAMPLES: &str = "\
Examples:
  nuvec launch -n 4 -- ./my-program --lr 1e-3
      4 ranks on this machine (ring backend, ports 32323 and up)
  nuvec launch --hosts 10.0.0.1,10.0.0.2 -n 2 -- ./my-program
      ranks 0,1 on 10.0.0.1 and 2,3 on 10.0.0.2, over ssh (same program path on each host)
  nuvec launch --hostfile hosts.json -- ./my-program
      the hosts of an mlx.launch hostfile ([{\"ssh\": \"mac1\", \"ips\": [\"10.0.0.1\"]}, ...])
  nuvec launch --backend mpi -n 4 -- ./my-program
      4 ranks started by mpirun
  nuvec launch --print-hostfile -n 2 -- ./my-program
      show each rank's environment without running anything

Every rank gets a fresh NUVEC_DISTRIBUTED_KEY unless one is set. See docs/launch.md.";

/// A fresh 32-byte key, hex encoded (what `openssl rand -hex 32` gives).
fn fresh_key() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random bytes for a key: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn hosts_and_backend(args: &LaunchArgs) -> Result<(Vec<Host>, LaunchBackend, Vec<String>), String> {
    let (hosts, file_backend, file_envs) = match &args.hostfile {
        Some(path) => {
            if let Some(hosts) = &args.hosts {
                warn(&format!(
                    "--hosts {hosts} is ignored: --hostfile names the hosts"
                ));
            }
            if let Some(n) = args.repeat_hosts {
                warn(&format!(
                    "-n {n} is ignored: with --hostfile each listed host is one rank (list a \
                     host several times for several ranks)"
                ));
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading the hostfile {}: {e}", path.display()))?;
            let parsed = parse_launch_hostfile(&text)
                .map_err(|e| format!("the hostfile {}: {e}", path.display()))?;
            (parsed.hosts, parsed.backend, parsed.envs)
        }
        None => (
            parse_host_list(
                args.hosts.as_deref().unwrap_or("127.0.0.1"),
                args.repeat_hosts.unwrap_or(1) as usize,
            )?,
            None,
            Vec::new(),
        ),
    };
    let backend = args
        .backend
        .clone()
        .or(file_backend)
        .unwrap_or_else(|| "ring".into());
    Ok((hosts, LaunchBackend::parse(&backend)?, file_envs))
}

/// mlx.launch's default `--nccl-port`.
const DEFAULT_NCCL_PORT: u16 = 12345;

/// A note on stderr about options that have no effect.
fn warn(message: &str) {
    eprintln!("nuvec launch: warning: {message}");
}

/// Whether `path` is a file to hand to the interpreter: not an executable program.
fn is_script(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = path
        .metadata()
        .is_ok_and(|m| m.permissions().mode() & 0o111 != 0);
    path.is_file() && (!executable || path.extension().is_some_and(|e| e == "py"))
}

/// `program` found on `PATH`, as a shell would.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

/// The command each rank runs: a script gets the interpreter in front (mlx.launch's rule), and
/// unless `verify` is off the program must exist here (a file, or a name on `PATH`).
fn command_to_run(
    command: &[String],
    python: Option<&str>,
    verify: bool,
) -> Result<Vec<String>, String> {
    let Some(program) = command.first() else {
        return Err("no command to launch: nuvec launch [options] -- COMMAND [ARGS...]".into());
    };
    let path = std::path::Path::new(program);
    if is_script(path) {
        let mut with = vec![python.unwrap_or("python3").to_string()];
        with.extend(command.iter().cloned());
        return Ok(with);
    }
    let found = if program.contains('/') {
        path.is_file()
    } else {
        on_path(program).is_some()
    };
    if verify && !found {
        return Err(format!(
            "no program {program:?} here{}: check the path (the same path is used on every \
             host), or pass --no-verify-script when it exists only on the other hosts",
            if program.contains('/') {
                ""
            } else {
                " or on PATH"
            }
        ));
    }
    Ok(command.to_vec())
}

/// Checks that this machine's ring ports are free before any rank starts.
fn check_ports(plans: &[RankPlan], options: &PlanOptions) -> Result<(), String> {
    if options.backend != LaunchBackend::Ring || plans.len() < 2 {
        return Ok(());
    }
    let addresses = plan::ring_addresses(
        &plans.iter().map(|p| p.host.clone()).collect::<Vec<_>>(),
        options.starting_port,
        options.connections_per_ip,
    )?;
    for (plan, node) in plans.iter().zip(addresses) {
        if !plan.host.is_local() {
            continue;
        }
        for address in node {
            if let Err(e) = std::net::TcpListener::bind(&address) {
                return Err(format!(
                    "rank {}'s address {address} is not free ({e}): choose another --starting-port",
                    plan.rank
                ));
            }
        }
    }
    Ok(())
}

fn print_plans(plans: &[RankPlan], key_source: &str) {
    for plan in plans {
        let place = if plan.host.is_local() { "local" } else { "ssh" };
        println!("rank {} on {} ({place})", plan.rank, plan.host.ssh);
        for (key, value) in &plan.env {
            println!("  {key}={value}");
        }
        for (key, contents) in &plan.files {
            println!("  {key}=<file> {contents}");
        }
        println!("  {KEY_VARIABLE}=<{key_source}>");
    }
}

/// Runs `nuvec launch`; returns the exit status.
pub(crate) fn run(args: LaunchArgs) -> Result<i32, String> {
    if args.print_python {
        let python = match &args.python {
            Some(python) => python.clone(),
            None => on_path("python3")
                .ok_or("no python3 on PATH (name one with --python)")?
                .to_string_lossy()
                .into_owned(),
        };
        println!("{python}");
        return Ok(0);
    }
    let (hosts, backend, mut env) = hosts_and_backend(&args)?;
    if args.nccl_port.is_some() && backend != LaunchBackend::Nccl {
        warn("--nccl-port is for --backend nccl; it is ignored");
    }
    env.extend(args.env.iter().cloned());
    // The key travels apart from the other variables (never on a command line).
    let mut key = std::env::var(KEY_VARIABLE).ok();
    let mut key_source = if key.is_some() {
        "from the environment"
    } else {
        "generated"
    };
    let mut kept = Vec::new();
    for entry in env {
        let (name, value) = parse_env(&entry)?;
        if name == KEY_VARIABLE {
            key = Some(value);
            key_source = "from --env";
        } else {
            kept.push(entry);
        }
    }
    let options = PlanOptions {
        backend,
        starting_port: args.starting_port,
        connections_per_ip: args.connections_per_ip as usize,
        verbose: args.verbose,
        env: kept,
        nccl_port: args.nccl_port.unwrap_or(DEFAULT_NCCL_PORT),
        repeat_hosts: args.repeat_hosts.unwrap_or(1) as usize,
    };
    let plans = plan(&hosts, &options)?;
    if args.print_hostfile {
        print_plans(&plans, key_source);
        return Ok(0);
    }
    let mut command = args.command.clone();
    if command.first().is_some_and(|c| c == "--") {
        command.remove(0);
    }
    let command = command_to_run(&command, args.python.as_deref(), !args.no_verify_script)?;
    let cwd = match &args.cwd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?,
    };
    if plans.iter().any(|p| p.host.is_local()) && !cwd.is_dir() {
        return Err(format!("--cwd {}: no such directory", cwd.display()));
    }
    if !(args.grace.is_finite() && args.grace >= 0.0) {
        return Err(format!(
            "--grace must be a non-negative number of seconds, got {}",
            args.grace
        ));
    }
    check_ports(&plans, &options)?;
    let files = std::env::temp_dir().join(format!(
        "nuvec-launch-{}-{}",
        std::process::id(),
        &fresh_key()?[..8]
    ));
    create_private_dir(&files)?;
    let (plans, command, label) = if backend == LaunchBackend::Mpi {
        // mpirun starts the ranks; the launcher supervises mpirun alone.
        let hostfile = files.join("mpi-hostfile");
        std::fs::write(&hostfile, mpi::mpi_hostfile(&hosts))
            .map_err(|e| format!("writing {}: {e}", hostfile.display()))?;
        let mpirun = mpi::find_mpirun()?;
        let local = hosts.iter().all(Host::is_local);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let open_mpi = mpi::probe(&mpirun);
        // Open MPI tags each line with its rank; the launcher makes the tags its prefixes.
        let tag_output = open_mpi.is_some() && !args.no_prefix;
        let flavor = mpi::Flavor {
            open_mpi,
            local,
            oversubscribed: local && hosts.len() > cores,
            root: crate::os::is_root(),
            tag_output,
        };
        let line = mpi::mpirun_command(
            &mpirun,
            flavor,
            &hostfile,
            args.cwd.as_deref(),
            &options.env,
            &args.mpi_arg,
            &command,
        )?;
        let local = Host {
            ssh: "127.0.0.1".into(),
            ips: Vec::new(),
            rdma: Vec::new(),
        };
        let plan = RankPlan {
            rank: 0,
            host: local,
            env: Vec::new(),
            files: Vec::new(),
        };
        let label = if tag_output {
            output::Label::MpiTags {
                space: open_mpi.is_some_and(|major| major >= 5),
            }
        } else {
            output::Label::Plain
        };
        (vec![plan], line, label)
    } else if args.no_prefix {
        (plans, command, output::Label::Plain)
    } else {
        (plans, command, output::Label::Prefix(String::new()))
    };
    let context = Context {
        command,
        cwd,
        key: match key {
            Some(key) => key,
            None => fresh_key()?,
        },
        files: files.clone(),
        ssh: args.ssh.split_whitespace().map(str::to_string).collect(),
        verbose: args.verbose,
    };
    if args.verbose {
        if backend == LaunchBackend::Mpi {
            eprintln!("[nuvec launch] {}", context.command.join(" "));
        } else {
            eprintln!(
                "[nuvec launch] {} ranks, backend {}, files in {}",
                plans.len(),
                backend.name(),
                files.display()
            );
        }
    }
    let outcome = supervise::run(
        &plans,
        &context,
        &label,
        Duration::from_secs_f64(args.grace),
        args.keep_going,
    );
    let _ = std::fs::remove_dir_all(&files);
    outcome
}

/// A directory only this user can read (the ranks' files live there).
fn create_private_dir(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(|e| format!("creating {}: {e}", path.display()))
}

/// Locks `mutex`, taking over a poisoned one (a panic elsewhere leaves the data usable).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
