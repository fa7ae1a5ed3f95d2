//! The `nuvec` command.
//!
//! `nuvec launch -n 4 -- ./my-program` starts a distributed program as 4 processes on this
//! machine (or on the hosts of `--hosts`/`--hostfile`, through ssh), giving each rank the
//! environment mlx.launch writes. See docs/launch.md. `nuvec generate` and `nuvec chat` run
//! a language model folder through nuvec-lm (docs/lm.md).

mod group;
mod launch;
mod lm;
mod os;

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
}

fn main() {
    let cli = Cli::parse();
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
    };
    std::process::exit(status);
}
