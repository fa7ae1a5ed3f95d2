//! Listing this machine's RDMA devices ([`devices`]), as `ibv_devices` and `ibv_devinfo` do,
//! with what JACCL needs to know: whether port 1 is up and which IPv4 address its GIDs carry.
#![allow(unsafe_code)]

use super::fabric::ffi::{Verbs, PORT_ACTIVE};
use super::fabric::verbs::ipv4_gid;
use std::net::Ipv4Addr;

/// A port's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// The link is up.
    Active,
    /// Any other state (down, initialising, …), with its verbs code.
    Inactive(u32),
    /// The device could not be opened or queried.
    Unknown,
}

/// An RDMA device and its first port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// The device's name, as the device file names it (`rdma_en3`, `mlx5_0`, …).
    pub name: String,
    /// The state of port 1.
    pub state: PortState,
    /// The IPv4 address of port 1's IPv4-mapped GID. `None` means JACCL cannot use the device
    /// yet: give its network interface an IPv4 address (a link-local 169.254.x.x one is enough).
    pub ipv4: Option<Ipv4Addr>,
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            PortState::Active => "active".to_string(),
            PortState::Inactive(code) => format!("not active (state {code})"),
            PortState::Unknown => "unknown (the device did not open)".to_string(),
        };
        match self.ipv4 {
            Some(ip) => write!(f, "{}: port 1 {state}, {ip}", self.name),
            None => write!(
                f,
                "{}: port 1 {state}, no IPv4 address (add a link-local IPv4 address to its interface)",
                self.name
            ),
        }
    }
}

/// This machine's RDMA devices, or why they cannot be listed (the verbs library does not load).
/// The emulated fabric has no devices to list.
pub fn devices() -> nuvec_core::Result<Vec<Device>> {
    let verbs = Verbs::load().map_err(|reason| nuvec_core::Error::Distributed {
        op: "jaccl devices".into(),
        rank: None,
        reason,
    })?;
    let (found, list) = verbs.device_list();
    let mut devices = Vec::with_capacity(found.len());
    for (name, device) in found {
        // SAFETY: the device comes from the live list; the context is closed below.
        let context = unsafe { (verbs.open_device)(device) };
        if context.is_null() {
            devices.push(Device {
                name,
                state: PortState::Unknown,
                ipv4: None,
            });
            continue;
        }
        let (state, ipv4) = match verbs.port(context) {
            Ok((state, table, _)) => {
                let ipv4 = ipv4_gid(&verbs, context, table)
                    .map(|(_, gid)| Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]));
                let state = if state == PORT_ACTIVE {
                    PortState::Active
                } else {
                    PortState::Inactive(state)
                };
                (state, ipv4)
            }
            Err(_) => (PortState::Unknown, None),
        };
        // SAFETY: `context` was opened above and is closed once.
        unsafe { (verbs.close_device)(context) };
        devices.push(Device { name, state, ipv4 });
    }
    if !list.is_null() {
        // SAFETY: `list` came from ibv_get_device_list and is freed once.
        unsafe { (verbs.free_device_list)(list) };
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_without_an_ipv4_address_says_what_to_do() {
        let device = Device {
            name: "rdma_en3".into(),
            state: PortState::Active,
            ipv4: None,
        };
        assert!(
            device.to_string().contains("add a link-local IPv4 address"),
            "{device}"
        );
        let ready = Device {
            ipv4: Some(Ipv4Addr::new(169, 254, 0, 2)),
            ..device
        };
        assert_eq!(ready.to_string(), "rdma_en3: port 1 active, 169.254.0.2");
    }

    #[test]
    fn listing_devices_works_where_the_library_is_installed() {
        match devices() {
            // Machines without RDMA hardware have the library but no device.
            Ok(devices) => assert!(devices.iter().all(|d| !d.name.is_empty())),
            Err(error) => assert!(
                std::env::var_os("NUVEC_REQUIRE_VERBS").is_none(),
                "NUVEC_REQUIRE_VERBS is set but {error}"
            ),
        }
    }
}
