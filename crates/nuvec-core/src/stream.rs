//! Devices and streams. nuvec computes on the CPU; the model mirrors MLX's so that code written
//! for a GPU stream reads the same.

/// Where arrays are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Device {
    /// The host CPU.
    Cpu,
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

/// The device arrays are computed on by default (always the CPU in this build).
pub fn default_device() -> Device {
    Device::Cpu
}

/// The stream arrays are computed on by default.
pub fn default_stream() -> Stream {
    Stream::default_cpu()
}
