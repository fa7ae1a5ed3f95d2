//! JACCL's configuration as `mlx.launch` writes it: the rank, a device file (`MLX_IBV_DEVICES`:
//! for each rank, for each peer, `null`, a device name or a list of names, one per cable), the
//! coordinator's address (`MLX_JACCL_COORDINATOR`) and whether to prefer the ring
//! (`MLX_JACCL_RING`). The `JACCL_*` spellings are read first, as MLX reads them.
//!
//! [`Config::topology`] chooses as MLX does, with errors that name the rank and peer at
//! fault: the ring when preferred and valid, else the mesh when valid, else the ring.

use crate::hostfile::Address;
use nuvec_core::{Error, Result};

/// The most ranks a mesh connects (MLX's limit).
pub const MESH_MAX_RANKS: usize = 8;
/// The most cables between two ranks: per direction on a ring (MLX's limit), per pair on a
/// mesh.
pub const RING_MAX_WIRES: usize = 4;

/// How the ranks are cabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// Every pair of ranks cabled; large transfers use every cable of a pair (MLX uses the
    /// first).
    Mesh,
    /// Every rank cabled to its two neighbours, with `wires` cables each way.
    Ring {
        /// Cables per direction.
        wires: usize,
    },
}

/// A JACCL group's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// This process's rank.
    pub rank: usize,
    /// For each rank, for each peer, the device names of the cables between them (empty for
    /// the rank itself and for peers it is not cabled to).
    pub devices: Vec<Vec<Vec<String>>>,
    /// Where rank 0 listens for the side channel (`ip:port`).
    pub coordinator: Option<Address>,
    /// Prefer the ring when both topologies are valid.
    pub prefer_ring: bool,
}

fn config_error(rank: Option<usize>, reason: String) -> Error {
    Error::Distributed {
        op: "jaccl".into(),
        rank,
        reason,
    }
}

/// `JACCL_<name>`, else `MLX_<mlx_name>`, from `env`.
fn variable(env: &dyn Fn(&str) -> Option<String>, name: &str, mlx_name: &str) -> Option<String> {
    env(&format!("JACCL_{name}")).or_else(|| env(&format!("MLX_{mlx_name}")))
}

impl Config {
    /// The configuration in this process's environment; `None` when its device file variable
    /// is not set (JACCL was not launched).
    pub fn from_env() -> Result<Option<Config>> {
        Config::from_vars(&|name| std::env::var(name).ok())
    }

    /// Whether this process's environment names a JACCL device file (JACCL was launched),
    /// without reading it.
    pub fn launched() -> bool {
        variable(
            &|name| std::env::var(name).ok(),
            "IBV_DEVICES",
            "IBV_DEVICES",
        )
        .is_some()
    }

    /// [`Config::from_env`] over the variables `env` gives.
    pub fn from_vars(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Config>> {
        let Some(path) = variable(env, "IBV_DEVICES", "IBV_DEVICES") else {
            return Ok(None);
        };
        let rank_text = variable(env, "RANK", "RANK").ok_or_else(|| {
            config_error(
                None,
                "JACCL_IBV_DEVICES/MLX_IBV_DEVICES is set but MLX_RANK is not".into(),
            )
        })?;
        let rank = rank_text
            .trim()
            .parse::<usize>()
            .map_err(|_| config_error(None, format!("the rank {rank_text:?} is not a number")))?;
        let text = std::fs::read_to_string(&path).map_err(|e| {
            config_error(Some(rank), format!("reading the device file {path}: {e}"))
        })?;
        let coordinator = variable(env, "COORDINATOR", "JACCL_COORDINATOR")
            .map(|a| {
                Address::parse(&a)
                    .map_err(|e| config_error(Some(rank), format!("coordinator: {e}")))
            })
            .transpose()?;
        let prefer_ring = variable(env, "RING", "JACCL_RING").is_some_and(|v| !v.is_empty());
        Config::parse(&text, rank, coordinator, prefer_ring).map(Some)
    }

    /// A configuration from the device file's JSON text.
    pub fn parse(
        text: &str,
        rank: usize,
        coordinator: Option<Address>,
        prefer_ring: bool,
    ) -> Result<Config> {
        let json: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| config_error(Some(rank), format!("the device file is not JSON: {e}")))?;
        let rows = json.as_array().ok_or_else(|| {
            config_error(
                Some(rank),
                "the device file must be a list with one row per rank".into(),
            )
        })?;
        let size = rows.len();
        let mut devices = Vec::with_capacity(size);
        for (i, row) in rows.iter().enumerate() {
            let row = row.as_array().filter(|r| r.len() == size).ok_or_else(|| {
                config_error(
                    Some(i),
                    format!("row {i} of the device file must list {size} peers"),
                )
            })?;
            let mut peers = Vec::with_capacity(size);
            for (j, entry) in row.iter().enumerate() {
                let names: Vec<String> = match entry {
                    serde_json::Value::Null => Vec::new(),
                    serde_json::Value::String(name) => vec![name.clone()],
                    serde_json::Value::Array(list) => list
                        .iter()
                        .map(|n| n.as_str().map(String::from))
                        .collect::<Option<_>>()
                        .ok_or_else(|| {
                            config_error(Some(i), format!("entry [{i}][{j}]: a list must hold device names"))
                        })?,
                    other => {
                        return Err(config_error(
                            Some(i),
                            format!("entry [{i}][{j}] must be null, a device name or a list of names, got {other}"),
                        ))
                    }
                };
                if i == j && !names.is_empty() {
                    return Err(config_error(
                        Some(i),
                        format!("entry [{i}][{i}] must be null: a rank is not cabled to itself"),
                    ));
                }
                peers.push(names);
            }
            devices.push(peers);
        }
        if rank >= size {
            return Err(config_error(
                None,
                format!("rank {rank} is out of range for a device file of {size} ranks"),
            ));
        }
        Ok(Config {
            rank,
            devices,
            coordinator,
            prefer_ring,
        })
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.devices.len()
    }

    /// Why the file does not describe a mesh, if it does not.
    fn mesh_problem(&self) -> Option<String> {
        let n = self.size();
        if n < 2 {
            return Some("a mesh needs at least 2 ranks".into());
        }
        if n > MESH_MAX_RANKS {
            return Some(format!(
                "a mesh connects at most {MESH_MAX_RANKS} ranks, the file has {n}"
            ));
        }
        let pairs = || {
            (0..n)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .filter(|&(i, j)| i != j)
        };
        if let Some((i, j)) = pairs().find(|&(i, j)| self.devices[i][j].is_empty()) {
            return Some(format!("rank {i} has no device to rank {j}"));
        }
        if let Some((i, j)) =
            pairs().find(|&(i, j)| self.devices[i][j].len() != self.devices[j][i].len())
        {
            return Some(format!(
                "rank {i} lists {} cable(s) to rank {j} but rank {j} lists {} back",
                self.devices[i][j].len(),
                self.devices[j][i].len()
            ));
        }
        pairs()
            .find(|&(i, j)| self.devices[i][j].len() > RING_MAX_WIRES)
            .map(|(i, j)| format!("ranks {i} and {j} have more than {RING_MAX_WIRES} cables"))
    }

    /// The ring's wires per direction, or why the file does not describe a ring.
    fn ring_wires(&self) -> std::result::Result<usize, String> {
        let n = self.size();
        if n < 2 {
            return Err("a ring needs at least 2 ranks".into());
        }
        let wires = self.devices[0][1 % n].len();
        for i in 0..n {
            let (right, left) = ((i + 1) % n, (i + n - 1) % n);
            for peer in [right, left] {
                let count = self.devices[i][peer].len();
                if count == 0 {
                    return Err(format!("rank {i} has no device to its neighbour {peer}"));
                }
                if count != wires {
                    return Err(format!(
                        "rank {i} has {count} device(s) to rank {peer}, rank 0 has {wires} to rank 1: every neighbour needs the same number"
                    ));
                }
            }
        }
        if wires > RING_MAX_WIRES {
            return Err(format!(
                "a ring uses at most {RING_MAX_WIRES} cables per direction, the file has {wires}"
            ));
        }
        Ok(wires)
    }

    /// The topology MLX would choose, or an error saying why neither fits. A coordinator is
    /// required (it runs the side channel).
    pub fn topology(&self) -> Result<Topology> {
        self.choose(false)
    }

    /// [`Config::topology`], without needing a coordinator when the caller brings its own
    /// side channel.
    pub(crate) fn choose(&self, own_side_channel: bool) -> Result<Topology> {
        // A configuration built in code may be ragged; one parsed from a file never is.
        let n = self.size();
        if self.rank >= n {
            return Err(config_error(
                None,
                format!(
                    "rank {} is out of range for a configuration of {n} ranks",
                    self.rank
                ),
            ));
        }
        if let Some(i) = (0..n).find(|&i| self.devices[i].len() != n) {
            return Err(config_error(
                Some(i),
                format!(
                    "row {i} of the devices must list {n} peers, it lists {}",
                    self.devices[i].len()
                ),
            ));
        }
        if self.coordinator.is_none() && !own_side_channel {
            return Err(config_error(
                Some(self.rank),
                "no coordinator: set MLX_JACCL_COORDINATOR to rank 0's ip:port (or pass jaccl::Options::side_channel)".into(),
            ));
        }
        let ring = self.ring_wires();
        if self.prefer_ring {
            if let Ok(wires) = ring {
                return Ok(Topology::Ring { wires });
            }
        }
        let mesh = self.mesh_problem();
        if mesh.is_none() {
            return Ok(Topology::Mesh);
        }
        match (ring, mesh) {
            (Ok(wires), _) => Ok(Topology::Ring { wires }),
            (Err(ring), Some(mesh)) => Err(config_error(
                Some(self.rank),
                format!("the device file describes neither a mesh ({mesh}) nor a ring ({ring})"),
            )),
            (Err(ring), None) => Err(config_error(Some(self.rank), ring)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coordinator() -> Option<Address> {
        Some(Address::parse("10.0.0.1:32323").unwrap())
    }

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, 0, coordinator(), false)
    }

    const MESH4: &str = r#"[
        [null, "rdma_en5", "rdma_en4", "rdma_en3"],
        ["rdma_en5", null, "rdma_en3", "rdma_en4"],
        ["rdma_en4", "rdma_en3", null, "rdma_en5"],
        ["rdma_en3", "rdma_en4", "rdma_en5", null]
    ]"#;

    #[test]
    fn mlx_documented_mesh_file_is_a_mesh_and_a_ring_when_preferred() {
        let config = parse(MESH4).unwrap();
        assert_eq!(config.size(), 4);
        assert_eq!(config.devices[1][2], ["rdma_en3"]);
        assert_eq!(config.topology().unwrap(), Topology::Mesh);
        let ring = Config::parse(MESH4, 2, coordinator(), true).unwrap();
        assert_eq!(ring.topology().unwrap(), Topology::Ring { wires: 1 });
    }

    #[test]
    fn lists_of_cables_make_a_ring_with_several_wires() {
        let text = r#"[
            [null, ["a", "b"], null, ["c", "d"]],
            [["a", "b"], null, ["e", "f"], null],
            [null, ["e", "f"], null, ["g", "h"]],
            [["c", "d"], null, ["g", "h"], null]
        ]"#;
        assert_eq!(
            parse(text).unwrap().topology().unwrap(),
            Topology::Ring { wires: 2 }
        );
    }

    #[test]
    fn invalid_files_are_errors_naming_the_entry_or_the_ranks() {
        let cases = [
            ("{}", "one row per rank"),
            ("[[null, \"a\"]]", "row 0"),
            ("[[\"a\", \"b\"], [\"b\", null]]", "[0][0] must be null"),
            ("[[null, 3], [\"b\", null]]", "entry [0][1]"),
            ("[[null, [1]], [\"b\", null]]", "device names"),
            ("not json", "not JSON"),
        ];
        for (text, expected) in cases {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
        let error = Config::parse("[[null, \"a\"], [\"a\", null]]", 2, coordinator(), false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("rank 2 is out of range"), "{error}");
    }

    #[test]
    fn files_that_are_neither_mesh_nor_ring_say_why() {
        // Rank 1 has one cable to rank 2 but two to rank 0, and rank 0 none to rank 2.
        let text = r#"[
            [null, ["a", "b"], null],
            [["a", "b"], null, "c"],
            [null, "c", null]
        ]"#;
        let error = parse(text).unwrap().topology().unwrap_err().to_string();
        assert!(
            error.contains("neither a mesh") && error.contains("rank 0 has no device to rank 2"),
            "{error}"
        );
        let nine: Vec<Vec<Option<&str>>> = (0..9)
            .map(|i| (0..9).map(|j| (i != j).then_some("d")).collect())
            .collect();
        let text = serde_json::to_string(&nine).unwrap();
        let config = parse(&text).unwrap();
        assert_eq!(
            config.topology().unwrap(),
            Topology::Ring { wires: 1 },
            "too many for a mesh"
        );
        let no_coordinator = Config::parse(MESH4, 0, None, false).unwrap();
        assert!(no_coordinator
            .topology()
            .unwrap_err()
            .to_string()
            .contains("MLX_JACCL_COORDINATOR"));
    }

    #[test]
    fn a_configuration_built_in_code_is_checked_before_use() {
        let mut config = parse(MESH4).unwrap();
        config.devices[2].pop();
        let error = config.topology().unwrap_err().to_string();
        assert!(
            error.contains("row 2 of the devices must list 4 peers"),
            "{error}"
        );
        let mut config = parse(MESH4).unwrap();
        config.rank = 9;
        assert!(config
            .topology()
            .unwrap_err()
            .to_string()
            .contains("rank 9 is out of range"));
    }

    #[test]
    fn a_mesh_needs_the_same_cables_from_both_ends_and_at_most_four() {
        let lopsided = r#"[[null, ["a", "b"]], ["a", null]]"#;
        let error = parse(lopsided).unwrap().topology().unwrap_err().to_string();
        assert!(
            error.contains("rank 0 lists 2 cable(s) to rank 1 but rank 1 lists 1 back"),
            "{error}"
        );
        let five = r#"[[null, ["a", "b", "c", "d", "e"]], [["a", "b", "c", "d", "e"], null]]"#;
        let error = parse(five).unwrap().topology().unwrap_err().to_string();
        assert!(error.contains("more than 4 cables"), "{error}");
        let four = r#"[[null, ["a", "b", "c", "d"]], [["a", "b", "c", "d"], null]]"#;
        assert_eq!(parse(four).unwrap().topology().unwrap(), Topology::Mesh);
    }

    #[test]
    fn the_environment_is_read_with_jaccl_spellings_first() {
        let path = std::env::temp_dir().join(format!("nuvec-jaccl-{}.json", std::process::id()));
        std::fs::write(&path, MESH4).unwrap();
        let vars = |name: &str| -> Option<String> {
            match name {
                "MLX_IBV_DEVICES" => Some(path.display().to_string()),
                "MLX_RANK" => Some("3".into()),
                "JACCL_RANK" => Some("1".into()),
                "MLX_JACCL_COORDINATOR" => Some("10.0.0.1:5000".into()),
                "MLX_JACCL_RING" => Some("1".into()),
                _ => None,
            }
        };
        let config = Config::from_vars(&vars).unwrap().unwrap();
        assert_eq!(config.rank, 1, "JACCL_RANK first");
        assert!(config.prefer_ring);
        assert_eq!(config.coordinator.unwrap().port, 5000);
        assert!(Config::from_vars(&|_| None).unwrap().is_none());
        let missing_rank =
            |name: &str| (name == "MLX_IBV_DEVICES").then(|| path.display().to_string());
        assert!(Config::from_vars(&missing_rank)
            .unwrap_err()
            .to_string()
            .contains("MLX_RANK"));
        let _ = std::fs::remove_file(&path);
    }
}
