//! `--over thunderbolt` (macOS hosts): the cables from each Mac's Thunderbolt ports, a /30
//! network per cable, the backend chosen as `mlx.distributed_config` chooses it, the setup
//! commands printed (and run with `--auto-setup`), the cables then measured, and the hostfile.

use super::hostfile::{jaccl_entries, ring_entries};
use super::macos::{parse_hardware_ports, parse_ibv_devices, parse_thunderbolt, setup_commands};
use super::topology::{find_ring, is_full_mesh, Topology};
use super::{probe, Backend, Session};
use std::io::IsTerminal;
use std::time::Duration;

/// Runs `command` on `host`, its stdout on success.
fn ask(session: &Session, host: &str, command: &str, step: &str) -> Result<String, String> {
    let done = session
        .remote
        .run(host, command, Duration::from_secs(60), step)?;
    if done.success() {
        Ok(done.stdout)
    } else {
        Err(format!("{host} ({step}): {}", done.reason()))
    }
}

/// Every host's cables, asked in parallel.
fn discover(session: &Session) -> Result<Topology, String> {
    let ports = std::thread::scope(|scope| {
        let handles: Vec<_> = session
            .names
            .iter()
            .map(|host| {
                scope.spawn(move || {
                    let profile = ask(
                        session,
                        host,
                        "system_profiler SPThunderboltDataType -json",
                        "reading the Thunderbolt ports",
                    )?;
                    let hardware = ask(
                        session,
                        host,
                        "networksetup -listallhardwareports",
                        "reading the interface names",
                    )?;
                    parse_thunderbolt(&profile, &parse_hardware_ports(&hardware), host)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("discovery panicked".into()))
            })
            .collect::<Result<Vec<_>, String>>()
    })?;
    Ok(Topology {
        names: session.names.clone(),
        links: super::macos::thunderbolt_links(&ports)?,
    })
}

/// The first pair of hosts with no cable between them.
fn missing_pair(topology: &Topology) -> Option<(usize, usize)> {
    let counts = topology.counts();
    let n = counts.len();
    (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .find(|&(i, j)| counts[i][j] == 0)
}

/// Prints each host's commands, then runs them with --auto-setup (where every host has
/// password-less sudo); otherwise waits for Enter at a terminal, as mlx.distributed_config does.
fn set_up(session: &Session, topology: &Topology) -> Result<bool, String> {
    let run = session.args.auto_setup;
    let without_sudo: Vec<&str> = session
        .names
        .iter()
        .zip(&session.facts)
        .filter(|(_, f)| !f.sudo)
        .map(|(n, _)| n.as_str())
        .collect();
    if run && !without_sudo.is_empty() {
        super::warn(&format!(
            "--auto-setup needs password-less sudo, which {} lack: printing the commands instead",
            without_sudo.join(", ")
        ));
    }
    let run = run && without_sudo.is_empty();
    let interactive = !run && !session.args.no_auto_setup && std::io::stdin().is_terminal();
    for (host, name) in session.names.iter().enumerate() {
        let commands = setup_commands(topology, host);
        let heading = format!("Setup for {name}");
        eprintln!(
            "{heading}\n{}\n{}\n",
            "=".repeat(heading.len()),
            commands.join("\n")
        );
        if run {
            let done = session.remote.run(
                name,
                &commands.join(" ; "),
                Duration::from_secs(60),
                "setting up the Thunderbolt network",
            )?;
            if !done.success() {
                return Err(format!(
                    "{name} (setting up the Thunderbolt network): {}",
                    done.reason()
                ));
            }
        } else if interactive {
            eprint!("Enter to continue");
            let _ = std::io::stdin().read_line(&mut String::new());
        }
    }
    Ok(run)
}

/// Configures over Thunderbolt cables.
pub(super) fn configure(session: &Session) -> Result<(), String> {
    session.log("reading every host's Thunderbolt ports");
    let mut topology = discover(session)?;
    if session.args.dot {
        print!("{}", topology.dot());
        return Ok(());
    }
    let counts = topology.counts();
    let ring = find_ring(&counts);
    let mesh = is_full_mesh(&counts);
    let rdma: Vec<Vec<String>> = session
        .names
        .iter()
        .map(|host| {
            session
                .remote
                .run(
                    host,
                    "ibv_devices",
                    Duration::from_secs(20),
                    "listing RDMA devices",
                )
                .map(|done| parse_ibv_devices(&done.stdout))
        })
        .collect::<Result<_, _>>()?;
    let no_rdma: Vec<&str> = session
        .names
        .iter()
        .zip(&rdma)
        .filter(|(_, d)| d.is_empty())
        .map(|(n, _)| n.as_str())
        .collect();
    let no_ring = || {
        format!(
            "the Thunderbolt cables form no ring through every host{} (run with --dot to see them)",
            missing_pair(&topology).map_or(String::new(), |(i, j)| format!(
                "; {} has no cable to {}",
                topology.names[i], topology.names[j]
            ))
        )
    };
    let need_rdma = |backend: &str| {
        if no_rdma.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{backend} needs RDMA over Thunderbolt, which {} lack (ibv_devices lists no rdma_ \
                 device; see docs/config.md to enable it)",
                no_rdma.join(", ")
            ))
        }
    };
    let backend = match session.args.backend {
        Some(b) => b,
        None if no_rdma.is_empty() && mesh => Backend::Jaccl,
        None if no_rdma.is_empty() && ring.is_some() => Backend::JacclRing,
        None if ring.is_some() => Backend::Ring,
        None => return Err(no_ring()),
    };
    match backend {
        Backend::Ring => {}
        Backend::Jaccl => {
            if let Some((i, j)) = missing_pair(&topology) {
                return Err(format!(
                    "jaccl needs a cable between every pair of hosts; {} has none to {} (run with \
                     --dot to see the cables)",
                    topology.names[i], topology.names[j]
                ));
            }
            need_rdma("jaccl")?;
        }
        Backend::JacclRing => need_rdma("jaccl-ring")?,
    }
    if backend != Backend::Jaccl && ring.is_none() {
        return Err(no_ring());
    }
    let applied = set_up(session, &topology)?;
    if applied && topology.names.len() > 1 {
        // The cables now have their addresses: check that each carries traffic.
        probe::probe_all(
            &session.remote,
            &mut topology,
            &session.nuvec,
            session.args.probe_bytes,
        );
        if let Some(dead) = topology.dead_links().first() {
            return Err(format!(
                "{}: no traffic after the setup (check the cable, then run again)",
                dead.describe(&topology.names)
            ));
        }
    }
    let entries = match backend {
        Backend::Ring => {
            let (order, width) = ring.expect("checked above");
            ring_entries(&topology, &order, width)
        }
        Backend::Jaccl | Backend::JacclRing => {
            // JACCL's side channel runs over each Mac's ordinary network (en0, else en1).
            let ips: Vec<Vec<String>> = session
                .names
                .iter()
                .map(|host| {
                    let address = ask(
                        session,
                        host,
                        "ipconfig getifaddr en0 || ipconfig getifaddr en1",
                        "reading the address of en0 or en1",
                    )
                    .unwrap_or_default();
                    let address = address.trim();
                    if address.is_empty() {
                        super::warn(&format!("{host}: en0 and en1 have no address"));
                        Vec::new()
                    } else {
                        vec![address.to_string()]
                    }
                })
                .collect();
            let (order, width) = match backend {
                Backend::Jaccl => ((0..topology.names.len()).collect(), None),
                _ => {
                    let (order, width) = ring.expect("checked above");
                    (order, Some(width))
                }
            };
            let device = |host: usize, iface: &str| {
                let name = format!("rdma_{iface}");
                rdma[host].contains(&name).then_some(name)
            };
            jaccl_entries(&topology, &order, &ips, width, &device)?
        }
    };
    session.save(backend.name(), &entries)
}
