//! Evaluating (or reading) an array inside a function being transformed, as MLX defines it:
//! under `grad`, `vjp` and `jvp` the value is computed and the gradient stays exact; under
//! `vmap` and `compile`, whose inputs are placeholders, it is an error naming the transform.

use nuvec::prelude::*;
use nuvec::transforms::{checkpoint, compile, grad, jvp, vjp, vmap};

fn close(got: &[f32], expected: &[f32]) {
    assert_eq!(got.len(), expected.len(), "{got:?} against {expected:?}");
    for (g, e) in got.iter().zip(expected) {
        assert!(
            (g - e).abs() <= 1e-5 * e.abs().max(1.0),
            "{got:?} against {expected:?}"
        );
    }
}

#[test]
fn grad_keeps_the_gradient_through_an_evaluated_intermediate() -> Result<()> {
    // f(x) = sum(2 x sin x), evaluated halfway: f'(x) = 2 (sin x + x cos x).
    let df = grad(|x: &[Array]| {
        let y = ops::sin(&x[0]) * &x[0];
        y.eval().expect("evaluating inside grad");
        ops::sum(&(y * 2.0), None, false)
    });
    let g = df(&[array![1.0, 2.0]])?;
    let expected: Vec<f32> = [1.0f32, 2.0]
        .iter()
        .map(|x| 2.0 * (x.sin() + x * x.cos()))
        .collect();
    close(&g[0].to_vec::<f32>()?, &expected);
    Ok(())
}

#[test]
fn grad_keeps_the_gradient_when_the_output_itself_is_evaluated() -> Result<()> {
    let df = grad(|x: &[Array]| {
        let y = ops::sum(&ops::square(&x[0]), None, false);
        y.eval().expect("evaluating the output inside grad");
        y
    });
    close(&df(&[array![1.0, -3.0]])?[0].to_vec::<f32>()?, &[2.0, -6.0]);
    Ok(())
}

#[test]
fn a_value_read_inside_grad_is_a_constant_of_the_function() -> Result<()> {
    // f(x) = sum(x²) · v with v = sum(x²) read as a number: f'(x) = 2x · v (v = 5 at [1, 2]).
    let df = grad(|x: &[Array]| {
        let y = ops::sum(&ops::square(&x[0]), None, false);
        let v = y.item::<f32>().expect("reading inside grad");
        y * f64::from(v)
    });
    close(&df(&[array![1.0, 2.0]])?[0].to_vec::<f32>()?, &[10.0, 20.0]);
    Ok(())
}

#[test]
fn vjp_and_jvp_keep_their_derivatives_through_evaluated_arrays() -> Result<()> {
    let triple = |x: &[Array]| {
        let y = &x[0] * 3.0;
        y.eval().expect("evaluating inside the transform");
        vec![ops::square(&y)]
    };
    // d(9x²)/dx = 18x.
    let (outputs, tangents) = jvp(triple, &[array![1.0]], &[array![1.0]])?;
    close(&outputs[0].to_vec::<f32>()?, &[9.0]);
    close(&tangents[0].to_vec::<f32>()?, &[18.0]);
    let (outputs, cotangents) = vjp(triple, &[array![2.0]], &[array![1.0]])?;
    close(&outputs[0].to_vec::<f32>()?, &[36.0]);
    close(&cotangents[0].to_vec::<f32>()?, &[36.0]);
    Ok(())
}

#[test]
fn gradients_of_checkpointed_and_nested_functions_survive_evaluation() -> Result<()> {
    // d/dx sum(x e^x) = e^x (1 + x), through a checkpoint that evaluates inside.
    let block = checkpoint(|x| {
        let y = ops::exp(&x[0]);
        y.eval().expect("evaluating inside a checkpoint");
        vec![y * &x[0]]
    });
    let g = grad(|x: &[Array]| ops::sum(&block(x)[0], None, false))(&[array![1.0, 2.0]])?;
    let expected: Vec<f32> = [1.0f32, 2.0].iter().map(|x| x.exp() * (1.0 + x)).collect();
    close(&g[0].to_vec::<f32>()?, &expected);
    // The second derivative of x³ is 6x, with an evaluation in the inner function.
    let inner = |x: &[Array]| {
        let cube = ops::power(&x[0], array![3.0]);
        cube.eval().expect("evaluating inside the inner grad");
        ops::sum(&cube, None, false)
    };
    let second = grad(move |x: &[Array]| {
        let first = grad(inner)(x).expect("the inner gradient");
        ops::sum(&first[0], None, false)
    })(&[array![2.0]])?;
    close(&second[0].to_vec::<f32>()?, &[12.0]);
    Ok(())
}

#[test]
fn evaluating_inside_vmap_or_compile_is_refused_as_mlx_refuses_it() {
    let evaluates = |x: &[Array]| {
        let y = &x[0] * 2.0;
        let outcome = y.eval();
        assert!(outcome.is_err(), "evaluating a placeholder succeeded");
        let error = outcome.unwrap_err().to_string();
        assert!(
            error.starts_with("[eval] attempting to eval an array during function transformations"),
            "{error}"
        );
        vec![y]
    };
    vmap(evaluates, &[Some(0)], &[Some(0)])(&[array![[1.0], [2.0]]]).expect("vmap itself");
    compile(evaluates)
        .call(&[array![1.0]])
        .expect("compile itself");
    // Reading a value is an evaluation too, and says which transform refused it.
    let read = vmap(
        |x: &[Array]| {
            let error = x[0].item::<f32>().unwrap_err().to_string();
            assert!(error.contains("here: vmap"), "{error}");
            vec![x[0].clone()]
        },
        &[Some(0)],
        &[Some(0)],
    )(&[array![1.0, 2.0]]);
    assert!(read.is_ok());
}

#[test]
fn arrays_that_do_not_depend_on_the_inputs_evaluate_inside_vmap() -> Result<()> {
    let scaled = vmap(
        |x: &[Array]| {
            let c = array![3.0];
            c.eval()
                .expect("a constant evaluates inside vmap, as in MLX");
            vec![&x[0] * &c]
        },
        &[Some(0)],
        &[Some(0)],
    )(&[array![[1.0], [2.0]]])?;
    close(&scaled[0].to_vec::<f32>()?, &[3.0, 6.0]);
    Ok(())
}
