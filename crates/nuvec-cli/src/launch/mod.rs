//! `nuvec launch`: mlx.launch's options and per-rank environment, with a real exit status,
//! process-group cleanup, rank-prefixed line output, no busy loop, a port check before start,
//! and a fresh pre-shared key for every launch unless one is set.

mod hosts;
mod mpi;
mod output;
mod plan;
mod spawn;
mod supervise;

use hosts::{parse_host_list, parse_launch_hostfile, Host};
use plan::{parse_env, plan, LaunchBackend, PlanOptions, RankPlan};
use spawn::{Context, KEY_VARIABLE};
use std::path::PathBuf;
use std::time::Duration;

/// `nuvec launch [options] -- COMMAND [ARGS…]`
#[derive(clap::Args, Debug)]
pub(crate) struct LaunchArgs {
    /// Comma-separated hosts (an IP address is also that host's ring address).
    #[arg(long, default_value = "127.0.0.1")]
    hosts: String,
    /// Start each host this many times, consecutively.
    #[arg(short = 'n', long = "repeat-hosts", default_value_t = 1)]
    repeat_hosts: usize,
    /// mlx.launch's hostfile: a list of {"ssh", "ips", "rdma"} hosts, or
    /// {"backend", "envs", "hosts"}.
    #[arg(long)]
    hostfile: Option<PathBuf>,
    /// ring, jaccl, jaccl-ring or mpi (default: the hostfile's, else ring).
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
    #[arg(short = 'p', long = "starting-port", default_value_t = 32323)]
    starting_port: u16,
    /// Ring addresses per IP per rank.
    #[arg(long = "connections-per-ip", default_value_t = 1)]
    connections_per_ip: usize,
    /// Prepend this program to the command (mlx.launch's --python).
    #[arg(long)]
    python: Option<String>,
    /// Log what the launcher does; the ring also gets MLX_RING_VERBOSE=1.
    #[arg(long)]
    verbose: bool,
    /// Extra arguments for mpirun (--backend mpi; repeatable).
    #[arg(long = "mpi-arg")]
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
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// A fresh 32-byte key, hex encoded (what `openssl rand -hex 32` gives).
fn fresh_key() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random bytes for a key: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn hosts_and_backend(args: &LaunchArgs) -> Result<(Vec<Host>, LaunchBackend, Vec<String>), String> {
    let (hosts, file_backend, file_envs) = match &args.hostfile {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading the hostfile {}: {e}", path.display()))?;
            let parsed = parse_launch_hostfile(&text)
                .map_err(|e| format!("the hostfile {}: {e}", path.display()))?;
            (parsed.hosts, parsed.backend, parsed.envs)
        }
        None => (
            parse_host_list(&args.hosts, args.repeat_hosts)?,
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
    let (hosts, backend, mut env) = hosts_and_backend(&args)?;
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
        connections_per_ip: args.connections_per_ip,
        verbose: args.verbose,
        env: kept,
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
    if let Some(python) = &args.python {
        command.insert(0, python.clone());
    }
    if command.is_empty() {
        return Err("no command to launch: nuvec launch [options] -- COMMAND [ARGS...]".into());
    }
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
    let (plans, command, prefix) = if backend == LaunchBackend::Mpi {
        // mpirun starts the ranks; the launcher supervises mpirun alone.
        let hostfile = files.join("mpi-hostfile");
        std::fs::write(&hostfile, mpi::mpi_hostfile(&hosts))
            .map_err(|e| format!("writing {}: {e}", hostfile.display()))?;
        let mpirun = mpi::find_mpirun()?;
        let local = hosts.iter().all(Host::is_local);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let flavor = mpi::Flavor {
            open_mpi: mpi::probe(&mpirun),
            local,
            oversubscribed: local && hosts.len() > cores,
            root: crate::os::is_root(),
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
        (vec![plan], line, false)
    } else {
        (plans, command, !args.no_prefix)
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
    };
    if args.verbose {
        if backend == LaunchBackend::Mpi {
            eprintln!("[nuvec launch] {}", context.command.join(" "));
        } else {
            eprintln!(
                "[nuvec launch] {} ranks, backend {backend:?}, files in {}",
                plans.len(),
                files.display()
            );
        }
    }
    let outcome = supervise::run(
        &plans,
        &context,
        prefix,
        Duration::from_secs_f64(args.grace),
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
