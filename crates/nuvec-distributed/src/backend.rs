//! Choosing and forming a backend: the one place that knows which backends this build has.

use crate::hostfile::{read_hostfile, Address};
use crate::ring::RingCommunicator;
use crate::Options;
use nuvec_core::distributed::{initialized_default, set_default_group, Communicator, Group};
use nuvec_core::{Error, Result};
use std::sync::{Arc, Mutex};

/// A distributed backend, as MLX names them. Every variant exists in every build; one that is
/// not built or cannot run here says so when asked to initialise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// The first backend whose launch environment is present: the ring (`MLX_HOSTFILE` and
    /// `MLX_RANK`), then JACCL (`MLX_IBV_DEVICES`), then MPI (a process of several started by
    /// `mpirun` or `srun`).
    Any,
    /// MLX's TCP ring (`MLX_HOSTFILE`, `MLX_RANK`).
    Ring,
    /// MLX's RDMA backend (`MLX_IBV_DEVICES`, `MLX_JACCL_COORDINATOR`, `MLX_RANK`): a mesh
    /// or a ring over ibverbs, or over the emulated fabric (`NUVEC_JACCL_FABRIC=emulated`).
    Jaccl,
    /// MPI: Open MPI loaded at run time, for processes started by `mpirun` or `srun`.
    Mpi,
    /// NCCL on one GPU per rank (`NCCL_HOST_IP`, `NCCL_PORT`, `MLX_RANK`, `MLX_WORLD_SIZE`,
    /// and `CUDA_VISIBLE_DEVICES` per rank, as `nuvec launch --backend nccl` and mlx.launch
    /// set them), in a build with the `nccl` feature (the facade's `cuda`).
    Nccl,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Any => "any",
            Backend::Ring => "ring",
            Backend::Jaccl => "jaccl",
            Backend::Mpi => "mpi",
            Backend::Nccl => "nccl",
        }
    }
}

/// Whether `backend` can run on this machine (a capability, not whether a group would form).
/// For MPI, whether the Open MPI library loads.
pub fn is_available(backend: Backend) -> bool {
    match backend {
        Backend::Any | Backend::Ring => true,
        Backend::Mpi => crate::mpi::available(),
        Backend::Jaccl => crate::jaccl::available(),
        Backend::Nccl => nccl_available().is_ok(),
    }
}

/// Whether NCCL can run here: built in, its library loads, and a GPU is usable; else why not.
fn nccl_available() -> std::result::Result<(), String> {
    #[cfg(feature = "nccl")]
    {
        nuvec_cuda::library::require(nuvec_cuda::library::Library::Nccl)
            .and_then(|()| nuvec_cuda::gpu(0).map(drop))
            .map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "nccl"))]
    Err(
        "the nccl backend is not in this build of nuvec: enable it with the `cuda` feature of \
         nuvec (or `nccl` of nuvec-distributed)"
            .into(),
    )
}

/// Forms the NCCL group of the launch environment; a group of one when not strict and not
/// launched for NCCL.
fn init_nccl(strict: bool) -> Result<Group> {
    let launch = crate::nccl::Launch::from_env()?;
    let Some(launch) = launch else {
        if strict {
            return Err(init_error(
                "no launch environment for the nccl backend: NCCL_HOST_IP is not set (start \
                 the program with `nuvec launch --backend nccl` or mlx.launch)"
                    .into(),
            ));
        }
        return Ok(Group::single());
    };
    let cannot_run = |reason: String| {
        init_error(format!(
            "this process was launched for NCCL (NCCL_HOST_IP is set), but the nccl backend \
             cannot run here: {reason}"
        ))
    };
    nccl_available().map_err(cannot_run)?;
    #[cfg(feature = "nccl")]
    {
        let options = Options::from_env().map_err(init_error)?;
        let communicator = crate::nccl::communicator::connect(&launch, &options)?;
        let group = Group::register(communicator);
        set_default_group(group);
        Ok(group)
    }
    // Without the feature `nccl_available` is always an error, returned above.
    #[cfg(not(feature = "nccl"))]
    {
        let _ = launch;
        Err(cannot_run("not built".into()))
    }
}

/// The world's size when the process was launched for NCCL (`NCCL_HOST_IP` set and
/// `MLX_WORLD_SIZE` above 1), as mlx.launch's nccl backend starts ranks.
fn nccl_launch_size() -> Option<usize> {
    std::env::var_os("NCCL_HOST_IP")?;
    let size: usize = std::env::var("MLX_WORLD_SIZE").ok()?.trim().parse().ok()?;
    (size > 1).then_some(size)
}

/// Serialises `init` calls so two threads cannot form two default groups.
static INIT: Mutex<()> = Mutex::new(());

fn init_error(reason: String) -> Error {
    Error::Distributed {
        op: "init".into(),
        rank: None,
        reason,
    }
}

/// Reads MLX's launch environment, forms the group it describes and makes it the default.
/// Without the environment, `init(false)` returns the group of this process alone and
/// `init(true)` fails naming the missing variables. A second call returns the same group.
///
/// ```
/// use nuvec_distributed::init;
/// # std::env::remove_var("MLX_HOSTFILE");
/// let group = init(false)?;
/// assert_eq!((group.rank(), group.size()), (0, 1));
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn init(strict: bool) -> Result<Group> {
    init_backend(strict, Backend::Any)
}

/// [`init`] with a named backend, as MLX's `init(backend=...)`.
pub fn init_backend(strict: bool, backend: Backend) -> Result<Group> {
    let group = init_serially(strict, backend)?;
    if group.size() > 1 && std::env::var_os("NUVEC_DISTRIBUTED_TRACE").is_some() {
        // A job that looks stuck but has not failed writes its records on `SIGUSR1`.
        crate::platform::write_trace_on_signal();
    }
    Ok(group)
}

fn init_serially(strict: bool, backend: Backend) -> Result<Group> {
    let _serial = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(group) = initialized_default() {
        // Never hand back a group that failed or was closed: form a new one instead.
        if group.health().is_ok() {
            return Ok(group);
        }
        group.close();
    }
    let ring_env = (
        std::env::var("MLX_HOSTFILE").ok(),
        std::env::var("MLX_RANK").ok(),
    );
    let ring_present = matches!(ring_env, (Some(_), Some(_)));
    // The ring's environment wins, as in MLX; then JACCL's; then MPI when mpirun/srun
    // started us.
    let jaccl = match backend {
        Backend::Jaccl => true,
        // Present even if broken: init_jaccl then reports what is wrong with it.
        Backend::Any => !ring_present && crate::jaccl::Config::launched(),
        _ => false,
    };
    if jaccl {
        return init_jaccl(strict);
    }
    let use_mpi = match backend {
        Backend::Mpi => true,
        Backend::Any => !ring_present && crate::mpi::launched_size().is_some(),
        _ => false,
    };
    if use_mpi {
        return init_mpi(strict);
    }
    let launched_for_nccl = nccl_launch_size().filter(|_| !ring_present && backend == Backend::Any);
    if backend == Backend::Nccl || launched_for_nccl.is_some() {
        // Launched for NCCL (`nuvec launch --backend nccl` or mlx.launch's): running alone
        // would give every rank a group of one, so an unusable NCCL is an error, strict or not.
        return init_nccl(strict || launched_for_nccl.is_some());
    }
    if !is_available(backend) {
        if strict {
            return Err(init_error(format!(
                "the {} backend is not available in this build of nuvec (available: ring{})",
                backend.name(),
                if crate::mpi::available() { ", mpi" } else { "" }
            )));
        }
        return Ok(Group::single());
    }
    let (hostfile, rank) = match ring_env {
        (Some(h), Some(r)) => (h, r),
        (h, r) => {
            if !strict {
                return Ok(Group::single());
            }
            let missing: Vec<&str> = [("MLX_HOSTFILE", h.is_none()), ("MLX_RANK", r.is_none())]
                .into_iter()
                .filter(|(_, absent)| *absent)
                .map(|(name, _)| name)
                .collect();
            return Err(init_error(format!(
                "no launch environment for the ring backend: {} not set (start the program with `nuvec launch` or `mlx.launch`, or under `mpirun` for MPI)",
                missing.join(" and ")
            )));
        }
    };
    let rank: usize = rank.trim().parse().map_err(|_| {
        init_error(format!(
            "MLX_RANK must be a non-negative integer, got {rank:?}"
        ))
    })?;
    let nodes = read_hostfile(&hostfile)?;
    let options = Options::from_env().map_err(init_error)?;
    let group = connect(&nodes, rank, &options)?;
    set_default_group(group);
    Ok(group)
}

/// JACCL in a build without it: an error whenever the environment asks for JACCL (even when
/// not strict), else the group of one when not strict.
#[cfg(not(feature = "jaccl"))]
fn init_jaccl(strict: bool) -> Result<Group> {
    jaccl_not_built(strict, crate::jaccl::Config::launched())
}

/// What `init` does for JACCL in a build without it. A process started with JACCL's
/// environment (`launched`) gets an error even when not strict: MLX falls back to a group of
/// one here, and N processes that each compute alone look like a run that worked.
#[cfg_attr(feature = "jaccl", allow(dead_code))]
fn jaccl_not_built(strict: bool, launched: bool) -> Result<Group> {
    const ENABLE: &str = "enable it with `cargo add nuvec --features jaccl` (or the `jaccl` feature of nuvec-distributed)";
    if launched {
        return Err(init_error(format!(
            "this process was started for the jaccl backend (MLX_IBV_DEVICES or JACCL_IBV_DEVICES is set), but jaccl is not in this build of nuvec: {ENABLE}, or start it for the ring backend"
        )));
    }
    if !strict {
        return Ok(Group::single());
    }
    Err(init_error(format!(
        "the jaccl backend is not in this build of nuvec: {ENABLE}"
    )))
}

/// Forms the JACCL group of the launch environment. Without it, the group of one when not
/// strict, else an error naming the missing variables.
#[cfg(feature = "jaccl")]
fn init_jaccl(strict: bool) -> Result<Group> {
    let Some(config) = crate::jaccl::Config::from_env()? else {
        if !strict {
            return Ok(Group::single());
        }
        return Err(init_error(
            "no launch environment for the jaccl backend: MLX_IBV_DEVICES (or JACCL_IBV_DEVICES) is not set; start the program with `nuvec launch --backend jaccl` or `mlx.launch --backend jaccl`".into(),
        ));
    };
    if config.size() == 1 {
        return Ok(Group::single());
    }
    let options = crate::jaccl::Options::from_env().map_err(init_error)?;
    let group = crate::jaccl::init_with(&config, &options)?;
    set_default_group(group);
    Ok(group)
}

/// Joins MPI's world. Outside `mpirun` MPI forms a world of one: the group of one when not
/// strict, else an error saying how to launch. Without an MPI library the group is this
/// process alone when not strict, unless the process was started as one of several.
///
/// A process that `mpirun` or `srun` started as one of several gets an error, even when not
/// strict, when MPI cannot be loaded: MLX falls back to a group of one there, and N processes
/// that each compute alone look like a run that worked.
fn init_mpi(strict: bool) -> Result<Group> {
    let launched = crate::mpi::launched_size();
    if launched.is_none() && !strict && !crate::mpi::available() {
        return Ok(Group::single());
    }
    let world = crate::mpi::world().map_err(|reason| {
        init_error(match launched {
            Some(size) => format!(
                "mpi: this process is one of {size} that mpirun or srun started ({}), but {reason}",
                crate::mpi::LAUNCH_SIZE_VARIABLES.join(", ")
            ),
            None => format!("mpi: {reason}"),
        })
    })?;
    if world.size() == 1 {
        if strict {
            return Err(init_error(
                "mpi: the MPI world has one process; start the program with `mpirun -n N`, `srun` or `nuvec launch --backend mpi`".into(),
            ));
        }
        return Ok(Group::single());
    }
    let group = Group::register(Arc::new(world));
    set_default_group(group);
    Ok(group)
}

/// Forms a ring group from listening addresses given in code (one list per rank); the group
/// is not made the default.
pub fn init_with<N: AsRef<[S]>, S: AsRef<str>>(
    nodes: &[N],
    rank: usize,
    options: &Options,
) -> Result<Group> {
    let parsed: Vec<Vec<Address>> = nodes
        .iter()
        .enumerate()
        .map(|(index, addresses)| {
            addresses
                .as_ref()
                .iter()
                .map(|a| {
                    Address::parse(a.as_ref())
                        .map_err(|reason| init_error(format!("rank {index}: {reason}")))
                })
                .collect()
        })
        .collect::<Result<_>>()?;
    if parsed.is_empty() {
        return Err(init_error("init_with needs at least one rank".into()));
    }
    connect(&parsed, rank, options)
}

fn connect(nodes: &[Vec<Address>], rank: usize, options: &Options) -> Result<Group> {
    options.validate().map_err(init_error)?;
    if nodes.len() == 1 {
        if rank != 0 {
            return Err(init_error(format!(
                "rank {rank} is out of range for a group of one"
            )));
        }
        return Ok(Group::single());
    }
    Ok(Group::register(Arc::new(RingCommunicator::connect(
        nodes, rank, options,
    )?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_without_jaccl_refuses_a_process_started_for_jaccl_even_when_not_strict() {
        for strict in [false, true] {
            let error = jaccl_not_built(strict, true).unwrap_err().to_string();
            assert!(
                error.starts_with("[init]")
                    && error.contains("started for the jaccl backend")
                    && error.contains("MLX_IBV_DEVICES")
                    && error.contains("--features jaccl"),
                "{error}"
            );
        }
        // Without JACCL's environment nothing asks for it: alone when not strict.
        assert_eq!(jaccl_not_built(false, false).unwrap().size(), 1);
        let error = jaccl_not_built(true, false).unwrap_err().to_string();
        assert!(
            error.contains("not in this build") && !error.contains("started for"),
            "{error}"
        );
    }
}
