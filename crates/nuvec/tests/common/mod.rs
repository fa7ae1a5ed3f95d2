//! Code shared by several test binaries.
#![allow(dead_code)]

pub(crate) mod broadcast;
pub(crate) mod collectives;
