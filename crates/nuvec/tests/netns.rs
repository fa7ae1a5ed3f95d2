//! Two ranks on two hosts: network namespaces joined by a veth pair, which the test creates
//! and removes. A link cut while the group is idle is reported by `health()` within the
//! keepalive window; a partition during a collective ends in an error (not a hang) that stays
//! after the link heals, and a new group then forms over the healed link.
//!
//! Needs root and iproute2 (`ip`); where namespaces cannot be created the tests say so and
//! skip, unless `NUVEC_REQUIRE_NETNS` is set (CI sets it where it can create them).

use nuvec::distributed::{self, Options};
use nuvec::prelude::*;
use nuvec_test_support::ranks::{is_child, launch_ranks, Launch};
use nuvec_test_support::test_name;
use std::process::Command;
use std::time::{Duration, Instant};

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Two namespaces joined by a veth pair, removed on drop.
struct Hosts {
    namespaces: [String; 2],
    links: [String; 2],
    addresses: [String; 2],
}

impl Hosts {
    /// Creates the hosts; `tag` keeps concurrent tests apart.
    fn create(tag: u32) -> Result<Hosts, String> {
        let id = std::process::id() % 10_000;
        let hosts = Hosts {
            namespaces: [format!("nuvec{id}{tag}a"), format!("nuvec{id}{tag}b")],
            links: [format!("nv{id}{tag}a"), format!("nv{id}{tag}b")],
            addresses: [
                format!("10.{}.{}.1", 100 + tag, id % 250),
                format!("10.{}.{}.2", 100 + tag, id % 250),
            ],
        };
        for ns in &hosts.namespaces {
            ip(&["netns", "add", ns])?;
        }
        ip(&[
            "link",
            "add",
            &hosts.links[0],
            "type",
            "veth",
            "peer",
            "name",
            &hosts.links[1],
        ])?;
        for side in 0..2 {
            let (ns, link) = (&hosts.namespaces[side], &hosts.links[side]);
            ip(&["link", "set", link, "netns", ns])?;
            let cidr = format!("{}/24", hosts.addresses[side]);
            ip(&["-n", ns, "addr", "add", &cidr, "dev", link])?;
            ip(&["-n", ns, "link", "set", link, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    fn launch(&self, group_timeout: Duration, port: u16) -> Launch {
        Launch {
            addresses: self
                .addresses
                .iter()
                .map(|a| format!("{a}:{port}"))
                .collect(),
            prefix: self
                .namespaces
                .iter()
                .map(|ns| ["ip", "netns", "exec", ns].map(String::from).to_vec())
                .collect(),
            env: vec![
                ("NUVEC_TEST_LINK".into(), self.links[0].clone()),
                ("NUVEC_TEST_ADDRESSES".into(), self.addresses.join(",")),
            ],
            group_timeout: Some(group_timeout),
            ..Launch::default()
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// The hosts, or `None` after saying visibly why namespaces cannot be made here.
fn hosts_or_skip(tag: u32) -> Option<Hosts> {
    if is_child() {
        return None;
    }
    match Hosts::create(tag) {
        Ok(hosts) => Some(hosts),
        Err(reason) => {
            assert!(
                std::env::var_os("NUVEC_REQUIRE_NETNS").is_none(),
                "NUVEC_REQUIRE_NETNS is set but namespaces cannot be created: {reason}"
            );
            nuvec_test_support::skip(&format!("cannot create network namespaces here ({reason})"));
            None
        }
    }
}

/// Rank 0 (in the first namespace) sets its end of the link down or up.
fn set_link(state: &str) {
    let link = std::env::var("NUVEC_TEST_LINK").unwrap();
    ip(&["link", "set", &link, state]).expect("changing the link");
}

#[test]
fn a_cut_link_is_reported_by_health_within_the_keepalive_window() {
    let name = test_name!();
    let hosts = hosts_or_skip(1);
    if hosts.is_none() && !is_child() {
        return;
    }
    let launch = hosts
        .as_ref()
        .map_or_else(Launch::default, |h| h.launch(Duration::from_secs(20), 5601));
    launch_ranks(name, 2, Duration::from_secs(60), &launch, |group| {
        let group = group.expect("forming across the veth link");
        let x = ops::ones(&[1024], DType::F32);
        distributed::all_sum(&x, Some(&group)).check().unwrap();
        group.health().expect("healthy before the cut");
        if group.rank() == 0 {
            // Let this rank's last bytes reach the peer first: returning from a collective
            // means they were handed to the kernel, not that they arrived.
            std::thread::sleep(Duration::from_millis(300));
            set_link("down");
        }
        let start = Instant::now();
        let error = nuvec_test_support::wait_until_unhealthy(
            &group,
            Duration::from_secs(40),
            Duration::from_millis(200),
        );
        let peer = 1 - group.rank();
        assert!(error.contains(&format!("rank {peer}")), "{error}");
        // Keepalive: 5 s idle, then 5 probes 2 s apart.
        assert!(
            start.elapsed() < Duration::from_secs(25),
            "reported after {:?}: {error}",
            start.elapsed()
        );
        eprintln!(
            "rank {} saw the cut after {:?}: {error}",
            group.rank(),
            start.elapsed()
        );
    });
}

#[test]
fn a_partition_during_a_collective_heals_into_an_error_not_a_hang() {
    let name = test_name!();
    let hosts = hosts_or_skip(2);
    if hosts.is_none() && !is_child() {
        return;
    }
    let launch = hosts
        .as_ref()
        .map_or_else(Launch::default, |h| h.launch(Duration::from_secs(3), 5602));
    launch_ranks(name, 2, Duration::from_secs(60), &launch, |group| {
        let group = group.expect("forming across the veth link");
        let x = ops::ones(&[1 << 16], DType::F32);
        distributed::all_sum(&x, Some(&group)).check().unwrap();
        if group.rank() == 0 {
            // Let this rank's last bytes reach the peer first: returning from a collective
            // means they were handed to the kernel, not that they arrived.
            std::thread::sleep(Duration::from_millis(300));
            set_link("down");
        } else {
            std::thread::sleep(Duration::from_millis(800));
        }
        let start = Instant::now();
        let error = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        let waited = start.elapsed();
        let peer = 1 - group.rank();
        assert!(error.contains(&format!("rank {peer}")), "{error}");
        assert!(
            waited < Duration::from_secs(10),
            "waited {waited:?}: {error}"
        );
        // The partition heals; the failed group keeps refusing work, at once.
        if group.rank() == 0 {
            set_link("up");
        }
        std::thread::sleep(Duration::from_secs(2));
        let start = Instant::now();
        let later = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        assert!(later.contains("failed earlier"), "{later}");
        assert!(start.elapsed() < Duration::from_secs(1));
        group.close();
        // A new group forms over the healed link and works.
        let addresses = std::env::var("NUVEC_TEST_ADDRESSES").unwrap();
        let nodes: Vec<Vec<String>> = addresses
            .split(',')
            .map(|a| vec![format!("{a}:5603")])
            .collect();
        let options = Options::with_timeout(Duration::from_secs(20));
        let regrouped = distributed::init_with(&nodes, group.rank(), &options)
            .expect("re-forming over the healed link");
        let total = distributed::all_sum(&x, Some(&regrouped))
            .to_vec::<f32>()
            .unwrap();
        assert!(total.iter().all(|&v| v == 2.0));
        regrouped.close();
    });
}
