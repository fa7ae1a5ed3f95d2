//! Small helpers several test files need: deterministic data, waiting for a group to notice a
//! failure, and the name of the running test (which multi-rank tests re-run in their ranks).

use nuvec_core::distributed::Group;
use nuvec_core::Array;
use std::time::{Duration, Instant};

/// Deterministic float64 values in `[low, high)` of `shape`, different for each `salt`.
pub fn values(shape: &[i32], low: f64, high: f64, salt: u64) -> Array {
    let size: i32 = shape.iter().product();
    let data: Vec<f64> = (0..size as u64)
        .map(|i| {
            let mixed = (i
                .wrapping_mul(2_654_435_761)
                .wrapping_add(salt.wrapping_mul(40_503)))
                % 10_007;
            low + (high - low) * (mixed as f64 / 10_007.0)
        })
        .collect();
    Array::from_vec(data, shape)
}

/// The error `group.health()` reports once it notices a failure, asked every `every`; panics
/// when it has not within `within`.
pub fn wait_until_unhealthy(group: &Group, within: Duration, every: Duration) -> String {
    let start = Instant::now();
    loop {
        match group.health() {
            Err(error) => return error.to_string(),
            Ok(()) if start.elapsed() < within => std::thread::sleep(every),
            Ok(()) => panic!("health noticed nothing in {within:?}"),
        }
    }
}

/// The running test's name as the test harness filters it (`module::test` for a test in a
/// module of the test crate): the name a multi-rank test re-runs itself by in its ranks.
///
/// ```
/// fn a_test() -> &'static str {
///     nuvec_test_support::test_name!()
/// }
/// assert!(a_test().ends_with("a_test"));
/// ```
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        $crate::helpers::test_name_of(::std::any::type_name_of_val(&here))
    }};
}

/// The test's name from the type name of a function declared in its body
/// (`crate::module::test::here`): the path without the crate and the function.
#[doc(hidden)]
pub fn test_name_of(here: &'static str) -> &'static str {
    let path = here.strip_suffix("::here").unwrap_or(here);
    path.split_once("::").map_or(path, |(_, test)| test)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_test_name_drops_the_crate_and_keeps_modules() {
        assert_eq!(
            super::test_name_of("distributed::messages::large_ones_arrive::here"),
            "messages::large_ones_arrive"
        );
        assert_eq!(super::test_name_of("distributed::a_test::here"), "a_test");
        assert_eq!(
            crate::test_name!(),
            "helpers::tests::the_test_name_drops_the_crate_and_keeps_modules"
        );
    }
}
