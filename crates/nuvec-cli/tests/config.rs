//! `nuvec config` on hosts of their own: network namespaces, each running a throwaway sshd
//! (reached over a management link of its own), cabled to each other by veth pairs on /30
//! networks as a ring or as a full mesh, with no routes between hosts that share no cable.
//! `nuvec config --over ethernet` finds and measures the cables, its DOT output is the
//! cabling, and `nuvec launch --hostfile` then runs the spec's first example over its
//! hostfile. A host without sshd, a cut cable and a host with another nuvec each give their
//! error.
//!
//! Needs root, iproute2 and openssh-server; without them the tests say so and skip, unless
//! `NUVEC_REQUIRE_NETNS` is set (CI sets it and installs both).

use nuvec_test_support::ranks::{example, free_port_range};
use nuvec_test_support::sshd::{run, SshServers};
use serde_json::Value;
use std::process::{Command, Output, Stdio};

/// Namespaces `node0…` cabled together, each with an sshd; removed on drop.
struct Cluster {
    namespaces: Vec<String>,
    /// Per cable: the two namespaces and the two interface names.
    cables: Vec<[(String, String); 2]>,
    servers: SshServers,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A namespace's veth ends go with it, and their peers with them.
        for ns in &self.namespaces {
            let _ = run("ip", &["netns", "del", ns]);
        }
    }
}

impl Cluster {
    /// `n` hosts cabled as `pairs` say; hosts listed in `without_sshd` get none, and
    /// `extra(i)` is host i's extra sshd config.
    fn create(
        n: usize,
        pairs: &[(usize, usize)],
        tag: u32,
        without_sshd: &[usize],
        extra: &dyn Fn(usize) -> String,
    ) -> Result<Cluster, String> {
        let id = std::process::id() % 10_000;
        let mut cluster = Cluster {
            namespaces: (0..n).map(|i| format!("nvc{id}{tag}n{i}")).collect(),
            cables: Vec::new(),
            servers: SshServers::new(&format!("config{tag}"))?,
        };
        for (i, ns) in cluster.namespaces.iter().enumerate() {
            run("ip", &["netns", "add", ns])?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
            // The management link: this machine ↔ host i, for ssh only.
            let (outside, inside) = (format!("vm{id}{tag}{i}"), format!("vmi{id}{tag}{i}"));
            run(
                "ip",
                &[
                    "link", "add", &outside, "type", "veth", "peer", "name", &inside,
                ],
            )?;
            run("ip", &["link", "set", &inside, "netns", ns])?;
            let address = |last: usize| format!("10.{}.{}.{}", 200 + tag, id % 250, 4 * i + last);
            run(
                "ip",
                &[
                    "addr",
                    "add",
                    &format!("{}/30", address(1)),
                    "dev",
                    &outside,
                ],
            )?;
            run("ip", &["link", "set", &outside, "up"])?;
            run(
                "ip",
                &[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{}/30", address(2)),
                    "dev",
                    &inside,
                ],
            )?;
            run("ip", &["-n", ns, "link", "set", &inside, "up"])?;
        }
        for (k, &(a, b)) in pairs.iter().enumerate() {
            let ends = [format!("c{k}n{a}"), format!("c{k}n{b}")];
            let temporary = [format!("t{id}{tag}{k}a"), format!("t{id}{tag}{k}b")];
            run(
                "ip",
                &[
                    "link",
                    "add",
                    &temporary[0],
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &temporary[1],
                ],
            )?;
            for (side, host) in [a, b].into_iter().enumerate() {
                let ns = &cluster.namespaces[host];
                run(
                    "ip",
                    &[
                        "link",
                        "set",
                        &temporary[side],
                        "netns",
                        ns,
                        "name",
                        &ends[side],
                    ],
                )?;
                let address = format!("192.168.0.{}/30", 4 * k + 1 + side);
                run(
                    "ip",
                    &["-n", ns, "addr", "add", &address, "dev", &ends[side]],
                )?;
                run("ip", &["-n", ns, "link", "set", &ends[side], "up"])?;
            }
            cluster.cables.push([
                (cluster.namespaces[a].clone(), ends[0].clone()),
                (cluster.namespaces[b].clone(), ends[1].clone()),
            ]);
        }
        for i in 0..n {
            if without_sshd.contains(&i) {
                continue;
            }
            let address = format!("10.{}.{}.{}", 200 + tag, id % 250, 4 * i + 2);
            let ns = cluster.namespaces[i].clone();
            cluster
                .servers
                .start(&format!("node{i}"), &address, 22, Some(&ns), &extra(i))?;
        }
        Ok(cluster)
    }

    fn ssh(&self) -> String {
        format!("ssh -F {}", self.servers.client_config())
    }

    /// `nuvec config --over ethernet --hosts node0,… ARGS`.
    fn config(&self, hosts: usize, args: &[&str]) -> Output {
        let list: Vec<String> = (0..hosts).map(|i| format!("node{i}")).collect();
        Command::new(env!("CARGO_BIN_EXE_nuvec"))
            .args(["config", "--over", "ethernet", "--probe-bytes", "1000000"])
            .args(["--hosts", &list.join(","), "--ssh", &self.ssh()])
            .args(args)
            .stdin(Stdio::null())
            .env_remove("NUVEC_DISTRIBUTED_KEY")
            .output()
            .unwrap()
    }
}

fn cluster_or_skip(
    n: usize,
    pairs: &[(usize, usize)],
    tag: u32,
    without_sshd: &[usize],
    extra: &dyn Fn(usize) -> String,
) -> Option<Cluster> {
    match Cluster::create(n, pairs, tag, without_sshd, extra) {
        Ok(cluster) => Some(cluster),
        Err(reason) => {
            assert!(
                std::env::var_os("NUVEC_REQUIRE_NETNS").is_none(),
                "NUVEC_REQUIRE_NETNS is set but the hosts cannot be made: {reason}"
            );
            nuvec_test_support::skip(&format!("cannot make namespaces with sshd here ({reason})"));
            None
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The DOT output's edges as sorted (host, host) label pairs.
fn dot_edges(dot: &str) -> Vec<(String, String)> {
    let labels: std::collections::HashMap<String, String> = dot
        .lines()
        .filter_map(|l| {
            let (id, rest) = l.trim().split_once(" [label=\"")?;
            let label = rest.split('"').next()?;
            (!id.contains("--")).then(|| (id.to_string(), label.to_string()))
        })
        .collect();
    let mut edges: Vec<(String, String)> = dot
        .lines()
        .filter_map(|l| {
            let (a, rest) = l.trim().split_once(" -- ")?;
            let b = rest.split_whitespace().next()?;
            let mut pair = [labels.get(a)?.clone(), labels.get(b)?.clone()];
            pair.sort();
            Some((pair[0].clone(), pair[1].clone()))
        })
        .collect();
    edges.sort();
    edges
}

/// Finds the topology, checks its DOT and hostfile, and launches the first example over it.
fn config_then_launch(n: usize, pairs: &[(usize, usize)], tag: u32) {
    let Some(cluster) = cluster_or_skip(n, pairs, tag, &[], &|_| String::new()) else {
        return;
    };
    let dot = cluster.config(n, &["--dot"]);
    assert!(dot.status.success(), "{}", text(&dot.stderr));
    let mut expected: Vec<(String, String)> = pairs
        .iter()
        .map(|&(a, b)| (format!("node{}", a.min(b)), format!("node{}", a.max(b))))
        .collect();
    expected.sort();
    assert_eq!(
        dot_edges(&text(&dot.stdout)),
        expected,
        "{}",
        text(&dot.stdout)
    );

    let hostfile = cluster.servers.path("hosts.json");
    let made = cluster.config(n, &["--output-hostfile", &hostfile]);
    let report = text(&made.stderr);
    assert!(made.status.success(), "{report}");
    eprintln!("{report}");
    // Every cable was measured.
    assert_eq!(
        report.matches("µs round trip").count(),
        pairs.len(),
        "{report}"
    );
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&hostfile).unwrap()).unwrap();
    let hosts = written["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), n);
    // Each rank's address is on its cable from the rank before it.
    for (i, host) in hosts.iter().enumerate() {
        let before = &hosts[(i + n - 1) % n]["ssh"];
        let me: usize = host["ssh"].as_str().unwrap()[4..].parse().unwrap();
        let them: usize = before.as_str().unwrap()[4..].parse().unwrap();
        let k = pairs
            .iter()
            .position(|&(a, b)| (a, b) == (me, them) || (a, b) == (them, me))
            .expect("neighbours in the hostfile are cabled");
        let side = usize::from(pairs[k].0 != me);
        assert_eq!(
            host["ips"],
            serde_json::json!([format!("192.168.0.{}", 4 * k + 1 + side)]),
            "{written}"
        );
    }

    let port = free_port_range(n).to_string();
    let launched = Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .args([
            "launch",
            "--hostfile",
            &hostfile,
            "--ssh",
            &cluster.ssh(),
            "-p",
            &port,
        ])
        .args(["--grace", "3", "--"])
        .arg(example("hello_distributed"))
        .stdin(Stdio::null())
        .env_remove("NUVEC_DISTRIBUTED_KEY")
        .output()
        .unwrap();
    let stdout = text(&launched.stdout);
    assert!(
        launched.status.success(),
        "{stdout}\n{}",
        text(&launched.stderr)
    );
    let expected = |prefix: bool| -> Vec<String> {
        (0..n)
            .map(|rank| {
                let tag = if prefix {
                    format!("[{rank}] ")
                } else {
                    String::new()
                };
                format!(
                    "{tag}rank {rank} of {n}: all_sum = array([{}, {}, {}], dtype=float32)",
                    n,
                    2 * n,
                    3 * n
                )
            })
            .collect()
    };
    for line in expected(true) {
        assert!(stdout.contains(&line), "{stdout}");
    }
    mlx_launch_runs_it_too(&cluster, &hostfile, &expected(false));
}

/// mlx.launch reads the same hostfile and runs the example on every host (its ssh is pointed
/// at the cluster's config by a wrapper first on its PATH).
fn mlx_launch_runs_it_too(cluster: &Cluster, hostfile: &str, expected: &[String]) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mlx_launch = root.join(".venv-mlx/bin/mlx.launch");
    if !mlx_launch.exists() {
        assert!(
            std::env::var_os("NUVEC_REQUIRE_MLX_LAUNCH").is_none(),
            "NUVEC_REQUIRE_MLX_LAUNCH is set but {} is missing",
            mlx_launch.display()
        );
        nuvec_test_support::skip(&format!(
            "mlx.launch over the hostfile: {} is missing (pip install \"mlx[cpu]==0.32.4\" into .venv-mlx)",
            mlx_launch.display()
        ));
        return;
    }
    let wrapper = cluster.servers.path("bin");
    std::fs::create_dir_all(&wrapper).unwrap();
    let ssh = format!("{wrapper}/ssh");
    let script = format!(
        "#!/bin/sh\nexec /usr/bin/ssh -F {} \"$@\"\n",
        cluster.servers.client_config()
    );
    std::fs::write(&ssh, script).unwrap();
    run("chmod", &["+x", &ssh]).unwrap();
    let path = format!("{wrapper}:{}", std::env::var("PATH").unwrap_or_default());
    let theirs = Command::new(&mlx_launch)
        .args(["--hostfile", hostfile, "--"])
        .arg(example("hello_distributed"))
        .env("PATH", path)
        .env_remove("NUVEC_DISTRIBUTED_KEY")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = text(&theirs.stdout);
    for line in expected {
        assert!(
            stdout.contains(line.as_str()),
            "mlx.launch: {stdout}\n{}",
            text(&theirs.stderr)
        );
    }
}

#[test]
fn on_four_hosts_cabled_as_a_ring_config_finds_the_ring_and_launch_runs_over_it() {
    config_then_launch(4, &[(0, 1), (1, 2), (2, 3), (3, 0)], 1);
}

#[test]
fn on_three_hosts_cabled_as_a_full_mesh_config_finds_it_and_launch_runs_over_it() {
    config_then_launch(3, &[(0, 1), (1, 2), (0, 2)], 2);
}

#[test]
fn a_host_without_sshd_a_cut_cable_and_another_nuvec_each_give_their_error() {
    // node3 has no sshd; node1's ssh sessions find another nuvec first on their PATH.
    let fake = std::env::temp_dir().join(format!("nuvec-fake-{}", std::process::id()));
    let real = std::env::temp_dir().join(format!("nuvec-real-{}", std::process::id()));
    for dir in [&fake, &real] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(fake.join("nuvec"), "#!/bin/sh\necho nuvec 0.0.1-other\n").unwrap();
    run("chmod", &["+x", &fake.join("nuvec").to_string_lossy()]).unwrap();
    let _ = std::fs::remove_file(real.join("nuvec"));
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_nuvec"), real.join("nuvec")).unwrap();
    let path_of = |i: usize| {
        let first = if i == 1 { &fake } else { &real };
        format!(
            "SetEnv PATH={}:/usr/sbin:/usr/bin:/sbin:/bin\n",
            first.display()
        )
    };
    let cluster = cluster_or_skip(4, &[(0, 1), (1, 2), (2, 0)], 3, &[3], &path_of);
    let Some(cluster) = cluster else {
        return;
    };

    let unreachable = cluster.config(4, &[]);
    let message = text(&unreachable.stderr);
    assert_eq!(unreachable.status.code(), Some(1), "{message}");
    assert!(
        message.contains("node3 (checking ssh access): ssh failed"),
        "{message}"
    );
    assert!(!message.contains("node0 ("), "{message}");

    let other = cluster.config(3, &["--nuvec", "nuvec"]);
    let message = text(&other.stderr);
    assert_eq!(other.status.code(), Some(1), "{message}");
    assert!(
        message.contains("node1 runs nuvec 0.0.1-other"),
        "{message}"
    );
    assert!(!message.contains("node0 runs"), "{message}");

    // Cut the cable between node1 and node2 at node1's end.
    let [(ns, end), _] = &cluster.cables[1];
    run("ip", &["-n", ns, "link", "set", end, "down"]).unwrap();
    let cut = cluster.config(3, &[]);
    let message = text(&cut.stderr);
    assert_eq!(cut.status.code(), Some(1), "{message}");
    assert!(
        message.contains("node1 c1n1 (192.168.0.5) ↔ node2 c1n2 (192.168.0.6): no traffic"),
        "{message}"
    );
    assert!(message.contains("--dot"), "{message}");
    eprintln!("{message}");
    let _ = std::fs::remove_dir_all(&fake);
    let _ = std::fs::remove_dir_all(&real);
}

/// Three "Macs": hosts whose ssh sessions find macOS's tools first on their PATH, stand-ins
/// printing what three Macs cabled as a triangle print (the recorded fixtures).
#[test]
fn over_thunderbolt_the_cables_macos_reports_give_the_dot_the_setup_and_the_hostfiles() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/config");
    let bins: Vec<std::path::PathBuf> = (0..3)
        .map(|i| std::env::temp_dir().join(format!("nuvec-mac{i}-{}", std::process::id())))
        .collect();
    for (i, bin) in bins.iter().enumerate() {
        std::fs::create_dir_all(bin).unwrap();
        let mac = i + 1;
        for (tool, body) in [
            ("uname", "echo Darwin".to_string()),
            (
                "system_profiler",
                format!("cat {fixtures}/mac{mac}-thunderbolt.json"),
            ),
            (
                "networksetup",
                format!("cat {fixtures}/mac{mac}-hardware-ports.txt"),
            ),
            (
                "ibv_devices",
                format!("cat {fixtures}/mac1-ibv-devices.txt"),
            ),
            ("ipconfig", format!("echo 10.0.1.2{mac}")),
        ] {
            let path = bin.join(tool);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            run("chmod", &["+x", &path.to_string_lossy()]).unwrap();
        }
    }
    let path_of = |i: usize| format!("SetEnv PATH={}:/usr/bin:/bin\n", bins[i].display());
    let Some(cluster) = cluster_or_skip(3, &[], 4, &[], &path_of) else {
        return;
    };
    let config = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_nuvec"))
            .args([
                "config",
                "--over",
                "thunderbolt",
                "--hosts",
                "node0,node1,node2",
            ])
            .args(["--ssh", &cluster.ssh()])
            .args(args)
            .stdin(Stdio::null())
            .env_remove("NUVEC_DISTRIBUTED_KEY")
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        (text(&output.stdout), text(&output.stderr))
    };

    let (dot, _) = config(&["--dot"]);
    assert!(dot.contains("a -- b [label=\"en2/en2\"];"), "{dot}");
    assert!(dot.contains("a -- c [label=\"en3/en3\"];"), "{dot}");
    assert!(dot.contains("b -- c [label=\"en3/en2\"];"), "{dot}");

    // RDMA everywhere and a full mesh: JACCL, as mlx.distributed_config chooses.
    let (printed, setup) = config(&["--no-auto-setup"]);
    let json = printed
        .strip_prefix("Hostfile\n========\n")
        .expect(&printed);
    let hostfile: Value = serde_json::from_str(json).unwrap();
    assert_eq!(hostfile["backend"], "jaccl");
    assert_eq!(
        hostfile["hosts"][0]["ips"],
        serde_json::json!(["10.0.1.21"])
    );
    let rdma: Vec<&Value> = (0..3).map(|i| &hostfile["hosts"][i]["rdma"]).collect();
    assert_eq!(*rdma[0], serde_json::json!([null, "rdma_en2", "rdma_en3"]));
    assert_eq!(*rdma[1], serde_json::json!(["rdma_en2", null, "rdma_en3"]));
    assert_eq!(*rdma[2], serde_json::json!(["rdma_en3", "rdma_en2", null]));
    // The setup is printed for each host and nothing is run.
    assert!(
        setup.contains(
            "Setup for node1\n===============\nsudo ifconfig bridge0 down\n\
             sudo ifconfig en2 inet 192.168.0.2 netmask 255.255.255.252\n\
             sudo route change 192.168.0.1 -interface en2\n"
        ),
        "{setup}"
    );

    // The ring: each Mac listens on its cable from the Mac before it.
    let file = cluster.servers.path("ring.json");
    config(&["--backend", "ring", "--output-hostfile", &file]);
    let ring: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(ring["backend"], "ring");
    let ips: Vec<&Value> = (0..3).map(|i| &ring["hosts"][i]["ips"][0]).collect();
    assert_eq!(ips, ["192.168.0.5", "192.168.0.2", "192.168.0.10"]);
    for bin in &bins {
        let _ = std::fs::remove_dir_all(bin);
    }
}
