//! The hosts and the links between them: which pairs are cabled (or share a network), whether
//! they form a ring or a full mesh, and the topology as a GraphViz graph.

use std::fmt::Write as _;

/// What a probe measured on a link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Measure {
    /// Median round trip of a one-byte message, in microseconds.
    pub(crate) round_trip_us: f64,
    /// Bytes per second of one bulk transfer.
    pub(crate) bytes_per_s: f64,
}

/// One end of a link: a host (by index) and its interface there.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct End {
    pub(crate) host: usize,
    pub(crate) iface: String,
    /// The end's IPv4 address, when it has (or is given) one.
    pub(crate) address: Option<String>,
}

/// A cable (or a shared network) between two hosts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Link {
    pub(crate) ends: [End; 2],
    /// Whether traffic crossed it: false once a probe failed.
    pub(crate) alive: bool,
    /// The probe's figures, when it was probed and traffic crossed.
    pub(crate) measure: Option<Measure>,
}

impl Link {
    pub(crate) fn new(a: End, b: End) -> Link {
        Link {
            ends: [a, b],
            alive: true,
            measure: None,
        }
    }

    /// `host`'s end and the other end, if `host` is on this link.
    pub(crate) fn end_at(&self, host: usize) -> Option<(&End, &End)> {
        if self.ends[0].host == host {
            Some((&self.ends[0], &self.ends[1]))
        } else if self.ends[1].host == host {
            Some((&self.ends[1], &self.ends[0]))
        } else {
            None
        }
    }

    /// Whether the link joins hosts `a` and `b` (either way round).
    pub(crate) fn joins(&self, a: usize, b: usize) -> bool {
        let (x, y) = (self.ends[0].host, self.ends[1].host);
        (x == a && y == b) || (x == b && y == a)
    }

    /// `mac-1 en2 ↔ mac-2 en3` with the hosts' names.
    pub(crate) fn describe(&self, names: &[String]) -> String {
        let end = |e: &End| match &e.address {
            Some(address) => format!("{} {} ({address})", names[e.host], e.iface),
            None => format!("{} {}", names[e.host], e.iface),
        };
        format!("{} ↔ {}", end(&self.ends[0]), end(&self.ends[1]))
    }
}

/// The hosts (their ssh names) and every link found between them.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Topology {
    pub(crate) names: Vec<String>,
    pub(crate) links: Vec<Link>,
}

impl Topology {
    /// `counts[i][j]`: how many of the links between hosts i and j are worth using (see
    /// [`Topology::links_between`]).
    pub(crate) fn counts(&self) -> Vec<Vec<usize>> {
        let n = self.names.len();
        (0..n)
            .map(|a| {
                (0..n)
                    .map(|b| {
                        if a == b {
                            0
                        } else {
                            self.links_between(a, b).len()
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// The links between hosts `a` and `b` worth using, fastest first: the working ones, less
    /// any measured at under half the fastest's speed (a ring's connections share its
    /// traffic equally, so a slow second link would hold the fast one back). Unmeasured links
    /// keep the order they were found in.
    pub(crate) fn links_between(&self, a: usize, b: usize) -> Vec<&Link> {
        let mut links: Vec<&Link> = self
            .links
            .iter()
            .filter(|l| l.alive && l.joins(a, b))
            .collect();
        let speed = |l: &Link| l.measure.map_or(0.0, |m| m.bytes_per_s);
        links.sort_by(|x, y| speed(y).total_cmp(&speed(x)));
        let fastest = links.first().map_or(0.0, |l| speed(l));
        links.retain(|l| l.measure.is_none() || speed(l) >= fastest / 2.0);
        links
    }

    /// The links that carried no traffic.
    pub(crate) fn dead_links(&self) -> Vec<&Link> {
        self.links.iter().filter(|l| !l.alive).collect()
    }

    /// The topology in GraphViz's DOT language: a node per host, an edge per link labelled
    /// with both interfaces (and the measured speed); a dead link is dashed and says so.
    pub(crate) fn dot(&self) -> String {
        let mut out = String::from("graph G {\n  node [shape=rectangle];\n");
        for (i, name) in self.names.iter().enumerate() {
            let _ = writeln!(out, "  {} [label=\"{}\"];", node_id(i), escape(name));
        }
        for link in &self.links {
            let [a, b] = &link.ends;
            let mut lines = vec![format!("{}/{}", a.iface, b.iface)];
            if let Some(m) = link.measure {
                lines.push(format!(
                    "{:.0} µs, {:.2} GB/s",
                    m.round_trip_us,
                    m.bytes_per_s / 1e9
                ));
            }
            let style = if link.alive {
                ""
            } else {
                lines.push("no traffic".into());
                ", style=dashed, color=red"
            };
            let label: Vec<String> = lines.iter().map(|l| escape(l)).collect();
            let _ = writeln!(
                out,
                "  {} -- {} [label=\"{}\"{style}];",
                node_id(a.host),
                node_id(b.host),
                label.join("\\n")
            );
        }
        out.push_str("}\n");
        out
    }
}

/// A GraphViz id for host `i`: a, b, …, z, ba, … (base 26, lowest digit first).
fn node_id(mut i: usize) -> String {
    let mut id = String::new();
    loop {
        id.push(char::from(b'a' + (i % 26) as u8));
        i /= 26;
        if i == 0 {
            return id;
        }
    }
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Whether every pair of hosts has at least one working link.
pub(crate) fn is_full_mesh(counts: &[Vec<usize>]) -> bool {
    let n = counts.len();
    (0..n).all(|i| (0..n).all(|j| i == j || counts[i][j] > 0))
}

/// A ring through every host (starting at host 0, hosts in their given order where that
/// works) and its width: the number of links every pair of neighbours has, as large as any
/// ring allows. One host is a ring of itself; two hosts need one link between them.
pub(crate) fn find_ring(counts: &[Vec<usize>]) -> Option<(Vec<usize>, usize)> {
    let n = counts.len();
    if n == 0 {
        return None;
    }
    if n == 1 {
        return Some((vec![0], 1));
    }
    let widest = counts.iter().flatten().copied().max().unwrap_or(0);
    (1..=widest).rev().find_map(|width| {
        let mut path = vec![0];
        let mut used = vec![false; n];
        used[0] = true;
        extend_ring(counts, width, &mut path, &mut used).then_some((path, width))
    })
}

/// Depth-first search for a Hamiltonian cycle over links of at least `width`.
fn extend_ring(
    counts: &[Vec<usize>],
    width: usize,
    path: &mut Vec<usize>,
    used: &mut [bool],
) -> bool {
    let n = counts.len();
    let last = *path.last().expect("the path starts at host 0");
    if path.len() == n {
        return counts[last][path[0]] >= width;
    }
    for next in 0..n {
        if used[next] || counts[last][next] < width {
            continue;
        }
        used[next] = true;
        path.push(next);
        if extend_ring(counts, width, path, used) {
            return true;
        }
        path.pop();
        used[next] = false;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(host: usize, iface: &str) -> End {
        End {
            host,
            iface: iface.into(),
            address: None,
        }
    }

    fn topology(n: usize, pairs: &[(usize, usize)]) -> Topology {
        Topology {
            names: (0..n).map(|i| format!("h{i}")).collect(),
            links: pairs
                .iter()
                .map(|&(a, b)| Link::new(end(a, &format!("e{b}")), end(b, &format!("e{a}"))))
                .collect(),
        }
    }

    #[test]
    fn a_ring_is_found_through_every_host_in_the_cabled_order() {
        // Cabled 0-2-1-3-0: the only ring.
        let t = topology(4, &[(0, 2), (2, 1), (1, 3), (3, 0)]);
        let (ring, width) = find_ring(&t.counts()).unwrap();
        assert_eq!(ring, [0, 2, 1, 3]);
        assert_eq!(width, 1);
        assert!(!is_full_mesh(&t.counts()));
    }

    #[test]
    fn a_full_mesh_keeps_the_hosts_order_and_doubled_cables_widen_the_ring() {
        let t = topology(3, &[(0, 1), (1, 2), (2, 0)]);
        assert!(is_full_mesh(&t.counts()));
        assert_eq!(find_ring(&t.counts()).unwrap(), (vec![0, 1, 2], 1));
        let doubled = topology(3, &[(0, 1), (0, 1), (1, 2), (1, 2), (2, 0), (2, 0), (0, 2)]);
        assert_eq!(find_ring(&doubled.counts()).unwrap().1, 2);
    }

    #[test]
    fn a_line_or_a_cut_cable_has_no_ring_and_the_dead_link_is_named() {
        let mut t = topology(4, &[(0, 1), (1, 2), (2, 3), (3, 0)]);
        t.links[1].alive = false;
        assert_eq!(find_ring(&t.counts()), None);
        let dead = t.dead_links();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].describe(&t.names), "h1 e2 ↔ h2 e1");
        assert_eq!(find_ring(&[vec![0]]), Some((vec![0], 1)));
        assert_eq!(find_ring(&topology(2, &[]).counts()), None);
        assert!(find_ring(&topology(2, &[(0, 1)]).counts()).is_some());
    }

    #[test]
    fn dot_has_a_node_per_host_and_an_edge_per_link() {
        let mut t = topology(3, &[(0, 1), (1, 2)]);
        t.links[1].alive = false;
        t.links[0].measure = Some(Measure {
            round_trip_us: 42.0,
            bytes_per_s: 2.5e9,
        });
        let dot = t.dot();
        assert!(
            dot.starts_with("graph G {\n  node [shape=rectangle];\n"),
            "{dot}"
        );
        assert!(dot.contains("  a [label=\"h0\"];\n  b [label=\"h1\"];\n  c [label=\"h2\"];"));
        assert!(
            dot.contains("a -- b [label=\"e1/e0\\n42 µs, 2.50 GB/s\"];"),
            "{dot}"
        );
        assert!(
            dot.contains("b -- c [label=\"e2/e1\\nno traffic\", style=dashed"),
            "{dot}"
        );
        assert_eq!(node_id(26), "ab");
    }

    #[test]
    fn the_fastest_link_between_two_hosts_comes_first() {
        let mut t = topology(2, &[(0, 1), (0, 1)]);
        t.links[1].measure = Some(Measure {
            round_trip_us: 10.0,
            bytes_per_s: 9e9,
        });
        t.links[0].measure = Some(Measure {
            round_trip_us: 10.0,
            bytes_per_s: 1e9,
        });
        let links = t.links_between(1, 0);
        assert_eq!(links[0].measure.unwrap().bytes_per_s, 9e9);
        // The slow link would hold the fast one back: it is left out, and the ring is 1 wide.
        assert_eq!(links.len(), 1);
        assert_eq!(find_ring(&t.counts()).unwrap().1, 1);
        t.links[0].measure.as_mut().unwrap().bytes_per_s = 6e9;
        assert_eq!(find_ring(&t.counts()).unwrap().1, 2);
    }
}
