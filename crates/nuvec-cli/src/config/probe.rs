//! Measuring a link: nuvec's own probe, run on the two hosts through ssh. One end listens on
//! its address (`nuvec probe listen`), the other connects to it (`nuvec probe measure`), times
//! one-byte round trips and one bulk transfer, and prints what it measured. A link that carries
//! nothing is dead, and named.

use super::remote::{quote, Remote};
use super::topology::{Link, Measure, Topology};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ChildStdout;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `nuvec probe …`: the two ends of a link measurement (run by `nuvec config` on the hosts).
#[derive(clap::Args, Debug)]
pub(crate) struct ProbeArgs {
    #[command(subcommand)]
    role: Role,
}

#[derive(clap::Subcommand, Debug)]
enum Role {
    /// Listen on ADDRESS (a free port), print `port N`, answer probes until stdin closes.
    Listen {
        #[arg(long)]
        bind: std::net::IpAddr,
    },
    /// Connect to ADDRESS:PORT, measure, print `round_trip_us=… bytes_per_s=…`.
    Measure {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long, default_value_t = 16 << 20)]
        bytes: u64,
    },
}

/// The listener's longest life, in case its stdin is never closed.
const LISTEN_LIMIT: Duration = Duration::from_secs(300);
/// How long a connection attempt may take before the link counts as dead.
const CONNECT_LIMIT: Duration = Duration::from_secs(3);
/// Round trips timed (after as many to warm up).
const PINGS: usize = 20;

/// Runs one end of a probe; the exit status.
pub(crate) fn run(args: ProbeArgs) -> i32 {
    let result = match args.role {
        Role::Listen { bind } => listen(bind),
        Role::Measure { to, bytes } => measure(to, bytes).map(|m| {
            println!(
                "round_trip_us={:.2} bytes_per_s={:.0}",
                m.round_trip_us, m.bytes_per_s
            );
        }),
    };
    match result {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("nuvec probe: {error}");
            1
        }
    }
}

fn listen(bind: std::net::IpAddr) -> Result<(), String> {
    let listener = TcpListener::bind((bind, 0)).map_err(|e| format!("listening on {bind}: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    println!("port {port}");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    // Ends when whoever started it closes stdin (or after the limit).
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    std::thread::spawn(|| {
        std::thread::sleep(LISTEN_LIMIT);
        std::process::exit(0);
    });
    for stream in listener.incoming().flatten() {
        let _ = answer(stream);
    }
    Ok(())
}

/// Answers one prober: `p` is echoed, `b` + length is read whole and acknowledged with `k`.
fn answer(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut command = [0u8; 1];
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        if stream.read(&mut command)? == 0 {
            return Ok(());
        }
        match command[0] {
            b'p' => stream.write_all(b"p")?,
            b'b' => {
                let mut length = [0u8; 8];
                stream.read_exact(&mut length)?;
                let mut left = u64::from_le_bytes(length);
                while left > 0 {
                    let take = left.min(buffer.len() as u64) as usize;
                    stream.read_exact(&mut buffer[..take])?;
                    left -= take as u64;
                }
                stream.write_all(b"k")?;
            }
            _ => return Ok(()),
        }
    }
}

fn measure(to: SocketAddr, bytes: u64) -> Result<Measure, String> {
    let mut stream = TcpStream::connect_timeout(&to, CONNECT_LIMIT)
        .map_err(|e| format!("connecting to {to}: {e}"))?;
    let io = |e: std::io::Error| format!("probing {to}: {e}");
    stream.set_nodelay(true).map_err(io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(io)?;
    let mut reply = [0u8; 1];
    let mut trips = Vec::with_capacity(PINGS);
    for i in 0..2 * PINGS {
        let start = Instant::now();
        stream.write_all(b"p").map_err(io)?;
        stream.read_exact(&mut reply).map_err(io)?;
        if i >= PINGS {
            trips.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    trips.sort_by(f64::total_cmp);
    let chunk = vec![0u8; 1 << 20];
    let start = Instant::now();
    stream.write_all(b"b").map_err(io)?;
    stream.write_all(&bytes.to_le_bytes()).map_err(io)?;
    let mut left = bytes;
    while left > 0 {
        let take = left.min(chunk.len() as u64) as usize;
        stream.write_all(&chunk[..take]).map_err(io)?;
        left -= take as u64;
    }
    stream.read_exact(&mut reply).map_err(io)?;
    let seconds = start.elapsed().as_secs_f64().max(1e-9);
    Ok(Measure {
        round_trip_us: trips[trips.len() / 2],
        bytes_per_s: bytes as f64 / seconds,
    })
}

/// Parses `measure`'s line.
fn parse_measure(text: &str) -> Option<Measure> {
    let field = |name: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
    };
    Some(Measure {
        round_trip_us: field("round_trip_us")?,
        bytes_per_s: field("bytes_per_s")?,
    })
}

/// The first line of `stdout`, within `limit`.
fn first_line(stdout: ChildStdout, limit: Duration) -> Option<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = sender.send(line);
    });
    receiver.recv_timeout(limit).ok()
}

/// Probes one link from its first end to its second; why it failed otherwise.
fn probe_link(
    remote: &Remote,
    names: &[String],
    link: &Link,
    nuvec: &str,
    bytes: u64,
) -> Result<Measure, String> {
    let [from, to] = &link.ends;
    let (Some(to_address), Some(_)) = (&to.address, &from.address) else {
        return Err("an end has no address".into());
    };
    let (to_host, from_host) = (&names[to.host], &names[from.host]);
    let mut listener = remote.spawn(
        to_host,
        &format!("exec {} probe listen --bind {to_address}", quote(nuvec)),
        "starting the link probe",
    )?;
    let port = listener
        .stdout
        .take()
        .and_then(|out| first_line(out, Duration::from_secs(15)))
        .and_then(|line| line.trim().strip_prefix("port ")?.parse::<u16>().ok());
    let result = match port {
        None => Err(format!(
            "{to_host}: the probe could not listen on {to_address}"
        )),
        Some(port) => {
            let target = if to_address.contains(':') {
                format!("[{to_address}]:{port}")
            } else {
                format!("{to_address}:{port}")
            };
            remote
                .run(
                    from_host,
                    &format!(
                        "{} probe measure --to {target} --bytes {bytes}",
                        quote(nuvec)
                    ),
                    Duration::from_secs(60),
                    "probing a link",
                )
                .and_then(|done| {
                    if done.success() {
                        parse_measure(&done.stdout)
                            .ok_or_else(|| format!("{from_host}: the probe printed no figures"))
                    } else {
                        Err(done
                            .reason()
                            .trim_start_matches("nuvec probe: ")
                            .to_string())
                    }
                })
        }
    };
    drop(listener.stdin.take());
    let _ = listener.kill();
    let _ = listener.wait();
    result
}

/// Probes every link of `topology` (one after the other, so transfers do not share a wire),
/// marking dead the ones that carried nothing; prints each result on stderr.
pub(crate) fn probe_all(remote: &Remote, topology: &mut Topology, nuvec: &str, bytes: u64) {
    eprintln!(
        "Links ({}, each probed with a {:.1} MB transfer):",
        topology.links.len(),
        bytes as f64 / 1e6
    );
    for i in 0..topology.links.len() {
        let described = topology.links[i].describe(&topology.names);
        match probe_link(remote, &topology.names, &topology.links[i], nuvec, bytes) {
            Ok(measure) => {
                eprintln!(
                    "  {described}: {:.0} µs round trip, {:.2} GB/s",
                    measure.round_trip_us,
                    measure.bytes_per_s / 1e9
                );
                topology.links[i].measure = Some(measure);
            }
            Err(reason) => {
                eprintln!("  {described}: no traffic ({reason})");
                topology.links[i].alive = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_measures_a_loopback_link_and_a_closed_port_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = answer(stream);
            }
        });
        let m = measure(address, 4 << 20).unwrap();
        assert!(m.round_trip_us > 0.0 && m.bytes_per_s > 0.0, "{m:?}");
        let printed = format!(
            "round_trip_us={:.2} bytes_per_s={:.0}",
            m.round_trip_us, m.bytes_per_s
        );
        assert!(parse_measure(&printed).is_some(), "{printed}");
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let error = measure(closed, 1).unwrap_err();
        assert!(
            error.starts_with(&format!("connecting to {closed}: ")),
            "{error}"
        );
    }
}
