//! Code shared by several test binaries.
#![allow(dead_code)]

pub(crate) mod all_to_all;
pub(crate) mod broadcast;
pub(crate) mod collectives;
pub(crate) mod split;
