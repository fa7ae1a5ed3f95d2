//! Code shared by several test binaries.
#![allow(dead_code)]

pub(crate) mod collectives;
