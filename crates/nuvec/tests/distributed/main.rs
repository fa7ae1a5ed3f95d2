//! Multi-rank tests of the ring backend, by topic: each test starts N processes of this binary
//! on loopback with the environment `mlx.launch` writes, and checks what they compute. Shared
//! here: the imports, the timeout and launching one test under several settings.

use nuvec::distributed::{self, Group};
use nuvec::prelude::*;
use nuvec_test_support::ranks::{launch_ranks, run_ranks, Launch};
use nuvec_test_support::test_name;

#[path = "../common/mod.rs"]
mod common;
use common::collectives::{self as references, check_collectives};
use std::time::Duration;

mod broadcast;
mod collectives;
mod failures;
mod messages;
mod settings;
mod split;
mod transforms;
mod tuning;
mod whereabouts;

pub(crate) const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `body` on `n` ranks once for each value of the environment variable `variable`;
/// `body` gets the group and the value its rank runs under.
pub(crate) fn launch_with_each(
    test: &str,
    n: usize,
    (variable, values): (&str, &[&str]),
    body: impl Fn(Group, &str),
) {
    for value in values {
        let launch = Launch {
            env: vec![(variable.into(), (*value).into())],
            ..Default::default()
        };
        launch_ranks(test, n, TIMEOUT, &launch, |group| {
            // A rank is one launch: its own environment says which value it runs under.
            let value = std::env::var(variable).unwrap_or_default();
            body(group.unwrap(), &value)
        });
        if nuvec_test_support::ranks::is_child() {
            return;
        }
    }
}
