//! Evaluation: laziness, evaluating once, async evaluation, donation and kernel panics.

use nuvec::ops;
use nuvec::prelude::*;
use std::sync::Arc;
use std::thread;

#[test]
fn nothing_computes_until_a_value_is_read() -> Result<()> {
    let a = ops::ones(&[4], DType::F32);
    let b = ops::exp(&a);
    let c = &b * 2.0;
    assert!(!b.is_evaluated() && !c.is_evaluated());
    c.eval()?;
    assert!(c.is_evaluated());
    Ok(())
}

#[test]
fn async_eval_returns_and_a_later_read_waits_for_the_result() -> Result<()> {
    let a = ops::arange(0.0, 1_000_000.0, 1.0, DType::F32);
    let b = ops::sqrt(&a).sum(None, false);
    nuvec::async_eval(std::slice::from_ref(&b));
    let expected: f64 = (0..1_000_000).map(|i| (i as f64).sqrt()).sum();
    let got = f64::from(b.item::<f32>()?);
    assert!(
        (got - expected).abs() / expected < 1e-5,
        "{got} vs {expected}"
    );
    Ok(())
}

#[test]
fn many_threads_evaluating_one_graph_all_see_the_same_values() -> Result<()> {
    let base = ops::arange(0.0, 10_000.0, 1.0, DType::F32);
    let shared = ops::exp(&ops::multiply(&base, 1e-4)).sum(None, false);
    let outputs: Vec<f32> = thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| shared.item::<f32>()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("evaluating thread panicked"))
            .collect::<Result<_>>()
    })?;
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
    Ok(())
}

#[test]
fn arrays_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Array>();
    let a = Arc::new(array![1.0]);
    let handle = thread::spawn(move || a.item::<f32>());
    assert_eq!(handle.join().unwrap().unwrap(), 1.0);
}

#[test]
fn an_intermediate_held_by_the_caller_is_never_overwritten_by_donation() -> Result<()> {
    let a = array![1.0, 4.0, 9.0];
    let root = ops::sqrt(&a);
    let doubled = &root * 2.0;
    let negated = ops::negative(&root);
    eval(&[doubled.clone(), negated.clone()])?;
    assert_eq!(root.to_vec::<f32>()?, [1.0, 2.0, 3.0]);
    assert_eq!(a.to_vec::<f32>()?, [1.0, 4.0, 9.0]);
    assert_eq!(negated.to_vec::<f32>()?, [-1.0, -2.0, -3.0]);
    Ok(())
}

#[test]
fn a_deep_chain_of_ops_evaluates_without_overflowing_the_stack() -> Result<()> {
    let mut x = array![0.0];
    for _ in 0..100_000 {
        x = &x + 1.0;
    }
    assert_eq!(x.item::<f32>()?, 100_000.0);
    Ok(())
}

#[test]
fn an_array_over_a_callers_buffer_is_read_without_a_copy_and_released() -> Result<()> {
    let data: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let tracker = Arc::new(());
    struct Owner(Vec<f32>, #[allow(dead_code)] Arc<()>);
    impl AsRef<[f32]> for Owner {
        fn as_ref(&self) -> &[f32] {
            &self.0
        }
    }
    let a = Array::from_owner(Owner(data, tracker.clone()), &[2, 3]);
    assert_eq!(Arc::strong_count(&tracker), 2);
    assert_eq!(a.sum(None, false).item::<f32>()?, 15.0);
    // A consumer never writes into the caller's memory, even when it is the sole owner.
    let b = ops::exp(&a);
    drop(a);
    assert_eq!(b.to_vec::<f32>()?[0], 1.0);
    assert_eq!(
        Arc::strong_count(&tracker),
        1,
        "the owner is dropped once nothing needs it"
    );
    Ok(())
}

#[test]
fn display_prints_like_mlx() {
    assert_eq!(
        array![[1, 2], [3, 4]].to_string(),
        "array([[1, 2],\n       [3, 4]], dtype=int32)"
    );
    assert_eq!(
        array![0.5, 2.0].to_string(),
        "array([0.5, 2], dtype=float32)"
    );
}

#[test]
fn dropping_a_deep_unevaluated_chain_does_not_overflow_the_stack() {
    let mut x = array![0.0];
    for _ in 0..200_000 {
        x = &x * 1.5;
    }
    drop(x);
}

/// A primitive whose kernel panics, standing in for a bug in a kernel.
#[derive(Debug)]
struct Exploding;

impl nuvec::primitive::Primitive for Exploding {
    fn name(&self) -> &str {
        "exploding"
    }
    fn eval_cpu(
        &self,
        _inputs: &mut [nuvec::primitive::Input],
        _outputs: &[nuvec::primitive::OutputSpec],
    ) -> Result<Vec<Arc<nuvec::primitive::Buffer>>> {
        panic!("kernel bug")
    }
}

#[test]
fn a_panicking_kernel_fails_its_node_instead_of_hanging_readers() {
    let bad = Array::from_primitive(Arc::new(Exploding), vec![array![1.0]], vec![1], DType::F32);
    let downstream = &bad + 1.0;
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let d = downstream.clone();
            thread::spawn(move || d.item::<f32>())
        })
        .collect();
    for reader in readers {
        let error = reader
            .join()
            .expect("reader thread panicked")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("exploding") && error.contains("kernel bug"),
            "{error}"
        );
    }
}
