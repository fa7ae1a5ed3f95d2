use nuvec::prelude::*;

#[test]
fn lazy_ops_compute_on_read() -> Result<()> {
    let a = array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let b = (&a + 1.0) * 2.0;
    assert!(!b.is_evaluated(), "{b:?}");
    assert_eq!(b.to_vec::<f32>()?, [4.0, 6.0, 8.0, 10.0, 12.0, 14.0]);
    assert_eq!(a.sum(None, false).item::<f32>()?, 21.0);
    assert_eq!(a.sum(1, true).shape(), [2, 1]);
    assert_eq!(
        ops::transpose(&a, None).to_vec::<f32>()?,
        [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    Ok(())
}

#[test]
fn bad_shapes_give_errors_naming_the_op() {
    let error = ops::add(array![1, 2, 3], array![1, 2]).check().unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("[add]") && text.contains("[3]") && text.contains("smoke.rs"),
        "{text}"
    );
}
