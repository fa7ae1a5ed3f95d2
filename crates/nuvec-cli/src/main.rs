//! The `nuvec` command.
//!
//! `nuvec launch -n 4 -- ./my-program` starts a distributed program as 4 processes on this
//! machine (or on the hosts of `--hosts`/`--hostfile`, through ssh), giving each rank the
//! environment mlx.launch writes. See [docs/launch.md](https://github.com/nuvec/nuvec/blob/main/docs/launch.md). `nuvec generate` and `nuvec chat` run
//! a language model folder through nuvec-lm ([docs/lm.md](https://github.com/nuvec/nuvec/blob/main/docs/lm.md)); `nuvec serve` serves it over
//! OpenAI's API ([docs/serve.md](https://github.com/nuvec/nuvec/blob/main/docs/serve.md)). `nuvec config` checks
//! the hosts, finds how they are joined and writes the hostfile
//! ([docs/config.md](https://github.com/nuvec/nuvec/blob/main/docs/config.md)). `nuvec trace`
//! reads the flight recorder's files.

mod config;
mod group;
mod launch;
mod lm;
mod os;
mod serve;
mod trace;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "nuvec", version, about = "nuvec's command-line tools")]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand, Debug)]
enum Commands {
    /// Start a program as the ranks of a distributed group (compatible with mlx.launch).
    Launch(launch::LaunchArgs),
    /// Generate text from a language model folder (as mlx_lm.generate).
    Generate(lm::GenerateArgs),
    /// Chat with a language model in the terminal (as mlx_lm.chat).
    Chat(lm::ChatArgs),
    /// Serve a language model over OpenAI's HTTP API (as mlx_lm.server).
    Serve(serve::ServeArgs),
    /// Check the hosts, find how they are joined, and write a hostfile (as
    /// mlx.distributed_config).
    Config(config::ConfigArgs),
    /// Show the ranks' flight-recorder files side by side and where they first diverge.
    Trace(trace::TraceArgs),
    /// One end of a link measurement (run on the hosts by `nuvec config`).
    #[command(hide = true)]
    Probe(config::probe::ProbeArgs),
}

/// The option a user probably meant by `unknown` (`--np` → `-n`), among `command`'s options.
fn suggestion(command: &clap::Command, unknown: &str) -> Option<String> {
    let name = unknown.trim_start_matches('-');
    let name = name.split('=').next().unwrap_or(name);
    // Other launchers' spellings of the number of processes.
    if ["np", "n", "num-processes", "nprocs", "num-ranks", "ranks"].contains(&name) {
        return Some("-n (--repeat-hosts: ranks per host)".into());
    }
    command
        .get_arguments()
        .filter_map(|a| a.get_long().map(|long| (a, long)))
        .map(|(a, long)| (edit_distance(name, long), a, long))
        .filter(|(distance, _, long)| *distance <= 2.min(long.len() / 2))
        .min_by_key(|(distance, _, _)| *distance)
        .map(|(_, a, long)| match a.get_short() {
            Some(short) => format!("-{short}/--{long}"),
            None => format!("--{long}"),
        })
}

/// Levenshtein distance between two option names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Parses the command line; an unknown option gets our own hint (clap's would suggest
/// passing it to the program with `--`).
fn parse() -> Cli {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::CommandFactory;
    let error = match Cli::try_parse() {
        Ok(cli) => return cli,
        Err(error) => error,
    };
    // mpirun's `-np 4` reads to clap as `-n p`: name it as the unknown option it is.
    let args: Vec<String> = std::env::args().collect();
    let mpirun_style = args
        .iter()
        .take_while(|a| *a != "--")
        .find(|a| *a == "-np")
        .cloned();
    let unknown = match (error.kind(), error.get(ContextKind::InvalidArg)) {
        (ErrorKind::UnknownArgument, Some(ContextValue::String(unknown))) => unknown.clone(),
        _ => match mpirun_style {
            Some(np) => np,
            None => error.exit(),
        },
    };
    let unknown = unknown.as_str();
    let root = Cli::command();
    let subcommand = args.get(1).cloned().unwrap_or_default();
    let (command, name) = match root.find_subcommand(&subcommand) {
        Some(command) => (command, format!("nuvec {subcommand}")),
        None => (&root, "nuvec".to_string()),
    };
    let hint = match suggestion(command, unknown) {
        Some(option) => format!(" (did you mean {option}?)"),
        None => String::new(),
    };
    eprintln!(
        "{name}: unknown option {unknown}{hint}; options go before the program, and everything \
         after `--` is the program's (see {name} --help)"
    );
    std::process::exit(2);
}

fn main() {
    let cli = parse();
    let status = match cli.command {
        Commands::Launch(args) => launch::run(args).unwrap_or_else(|error| {
            eprintln!("nuvec launch: {error}");
            1
        }),
        Commands::Generate(args) => lm::generate(args).unwrap_or_else(|error| {
            eprintln!("nuvec generate: {error}");
            1
        }),
        Commands::Chat(args) => lm::chat(args).unwrap_or_else(|error| {
            eprintln!("nuvec chat: {error}");
            1
        }),
        Commands::Serve(args) => serve::run(args).unwrap_or_else(|error| {
            eprintln!("nuvec serve: {error}");
            1
        }),
        Commands::Config(args) => config::run(args).unwrap_or_else(|error| {
            eprintln!("nuvec config: {error}");
            1
        }),
        Commands::Trace(args) => trace::run(args).unwrap_or_else(|error| {
            eprintln!("nuvec trace: {error}");
            1
        }),
        Commands::Probe(args) => config::probe::run(args),
    };
    std::process::exit(status);
}
