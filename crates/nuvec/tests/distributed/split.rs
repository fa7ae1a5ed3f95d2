//! `Group::split` on the ring: sub-groups by color ordered by key, each with connections of
//! its own, working at the same time as each other and as the parent.

use super::*;

#[test]
fn ring_groups_split_by_color_and_order_by_key() {
    run_ranks(
        test_name!(),
        4,
        TIMEOUT,
        common::split::groups_split_by_color_and_order_by_key,
    );
}

/// On every rank, one thread sums over the parent while another sums over its half.
#[test]
fn a_split_group_and_its_parent_run_at_the_same_time_without_mixing() {
    run_ranks(
        test_name!(),
        4,
        TIMEOUT,
        common::split::a_split_group_runs_beside_its_parent,
    );
}
