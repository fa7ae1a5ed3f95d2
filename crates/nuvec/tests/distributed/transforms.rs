//! Collectives under the transforms: gradients with MLX's rules, vmap, compile.

use super::*;

#[test]
fn send_batches_under_vmap_and_refuses_grad_and_jvp() {
    run_ranks(test_name!(), 2, TIMEOUT, references::send_under_transforms);
}

#[test]
fn gradients_flow_through_collectives_with_mlx_rules() {
    run_ranks(
        test_name!(),
        2,
        TIMEOUT,
        references::gradients_follow_mlx_rules,
    );
}

#[test]
fn vmap_through_collectives_equals_collectives_of_slices() {
    run_ranks(
        test_name!(),
        3,
        TIMEOUT,
        references::vmap_through_collectives,
    );
}

#[test]
fn compiled_collectives_communicate_on_every_call() {
    run_ranks(
        test_name!(),
        2,
        TIMEOUT,
        references::compiled_collectives_communicate_every_call,
    );
}
