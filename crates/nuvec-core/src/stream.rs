//! Devices and streams, in MLX's model: every op runs on a device, by default the GPU when one
//! is usable (in a build with the `cuda` feature) and the CPU otherwise.
//!
//! The default can be set for the process ([`set_default_device`]), for a scope on this
//! thread ([`with_default_device`]), or from the environment (`NUVEC_DEFAULT_DEVICE=cpu`,
//! `gpu` or `gpu:N`). An op's inputs may live anywhere: evaluation copies them to the op's
//! device (and keeps a host array's copy on the GPU for its next use there).

use crate::{Error, Result};
use std::cell::Cell;
use std::panic::Location;
use std::sync::{Mutex, OnceLock};

/// Where arrays are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Device {
    /// The host CPU.
    Cpu,
    /// CUDA device `i` (a build with the `cuda` feature, on a machine with the driver).
    Gpu(usize),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Gpu(i) => write!(f, "gpu:{i}"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = Error;

    /// `cpu`, `gpu` (device 0) or `gpu:N`.
    fn from_str(text: &str) -> Result<Device> {
        let bad = || {
            Error::invalid(
                "device",
                format!("expected `cpu`, `gpu` or `gpu:N`, got {text:?}"),
                Location::caller(),
            )
        };
        match text.trim() {
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu(0)),
            other => other
                .strip_prefix("gpu:")
                .and_then(|i| i.parse().ok())
                .map(Device::Gpu)
                .ok_or_else(bad),
        }
    }
}

impl Device {
    /// Why arrays cannot be computed on this device here, or `None` when they can.
    pub fn unavailable_reason(self) -> Option<String> {
        match self {
            Device::Cpu => None,
            #[cfg(feature = "cuda")]
            Device::Gpu(i) => nuvec_cuda::gpu(i)
                .err()
                .map(|e| format!("gpu:{i} is not available: {e}")),
            #[cfg(not(feature = "cuda"))]
            Device::Gpu(i) => Some(format!(
                "gpu:{i} is not available: this build of nuvec has no GPU support (build with \
                 the `cuda` feature)"
            )),
        }
    }

    /// Whether arrays can be computed on this device here.
    pub fn is_available(self) -> bool {
        self.unavailable_reason().is_none()
    }
}

/// An ordered queue of work on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stream {
    /// The device the stream runs on.
    pub device: Device,
    /// The stream's index on its device.
    pub index: usize,
}

impl Stream {
    /// The default CPU stream; [`crate::async_eval`] hands work to its worker thread.
    pub const fn default_cpu() -> Stream {
        Stream {
            device: Device::Cpu,
            index: 0,
        }
    }
}

thread_local! {
    static SCOPED: Cell<Option<Device>> = const { Cell::new(None) };
}

static CHOSEN: Mutex<Option<Device>> = Mutex::new(None);

/// The device chosen before any setting: `NUVEC_DEFAULT_DEVICE` when set, else GPU 0 when it
/// is usable, else the CPU (MLX's choice). A bad variable is reported once and ignored.
fn initial() -> Device {
    static INITIAL: OnceLock<Device> = OnceLock::new();
    *INITIAL.get_or_init(|| {
        if let Ok(text) = std::env::var("NUVEC_DEFAULT_DEVICE") {
            match text.parse::<Device>() {
                Ok(device) => return device,
                Err(error) => eprintln!("nuvec: NUVEC_DEFAULT_DEVICE ignored: {error}"),
            }
        }
        if cfg!(feature = "cuda") && Device::Gpu(0).is_available() {
            Device::Gpu(0)
        } else {
            Device::Cpu
        }
    })
}

/// The device new ops run on: the scope's ([`with_default_device`]), else the process's
/// ([`set_default_device`]), else GPU 0 when usable, else the CPU.
///
/// ```
/// use nuvec_core::{default_device, with_default_device, Device};
/// with_default_device(Device::Cpu, || assert_eq!(default_device(), Device::Cpu));
/// ```
pub fn default_device() -> Device {
    if let Some(device) = SCOPED.with(Cell::get) {
        return device;
    }
    let chosen = *CHOSEN.lock().unwrap_or_else(|p| p.into_inner());
    chosen.unwrap_or_else(initial)
}

/// Makes `device` the process's default device; a device that cannot be used here is an
/// error saying why (as MLX refuses a GPU without a GPU backend).
///
/// ```
/// use nuvec_core::{set_default_device, Device};
/// set_default_device(Device::Cpu)?;
/// if !Device::Gpu(0).is_available() {
///     assert!(set_default_device(Device::Gpu(0)).is_err());
/// }
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn set_default_device(device: Device) -> Result<()> {
    if let Some(reason) = device.unavailable_reason() {
        return Err(Error::invalid(
            "set_default_device",
            reason,
            Location::caller(),
        ));
    }
    *CHOSEN.lock().unwrap_or_else(|p| p.into_inner()) = Some(device);
    Ok(())
}

/// Runs `f` with `device` as this thread's default device (ops built inside run there).
pub fn with_default_device<R>(device: Device, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Device>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPED.with(|scoped| scoped.set(self.0));
        }
    }
    let _restore = Restore(SCOPED.with(|scoped| scoped.replace(Some(device))));
    f()
}

/// The stream arrays are computed on by default (index 0 of the default device).
pub fn default_stream() -> Stream {
    Stream {
        device: default_device(),
        index: 0,
    }
}
