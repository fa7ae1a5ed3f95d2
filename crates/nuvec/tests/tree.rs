//! Trees of arrays through the transforms: derived structs, vectors, maps, tuples and
//! options, differentiated as one value.

use nuvec::ops;
use nuvec::prelude::*;
use nuvec::transforms::{grad, tree, tree_flatten, tree_unflatten, Tree};
use std::collections::{BTreeMap, HashMap};

#[derive(Tree, Clone, Debug)]
struct Linear {
    weight: Array,
    bias: Option<Array>,
}

#[derive(Tree, Clone, Debug)]
struct Mlp {
    layers: Vec<Linear>,
    scale: (Array,),
    #[tree(skip)]
    activation: String,
}

#[derive(Tree)]
struct Pair(Array, Array);

fn mlp() -> Mlp {
    Mlp {
        layers: vec![
            Linear {
                weight: array![[0.5, -1.0], [1.5, 2.0]],
                bias: Some(array![0.1, -0.2]),
            },
            Linear {
                weight: array![[1.0], [-0.5]],
                bias: None,
            },
        ],
        scale: (array![2.0],),
        activation: "tanh".into(),
    }
}

fn forward(model: &Mlp, x: &Array) -> Array {
    let mut h = x.clone();
    for layer in &model.layers {
        h = ops::matmul(&h, &layer.weight);
        if let Some(b) = &layer.bias {
            h = ops::tanh(&(h + b));
        }
    }
    ops::sum(&(h * &model.scale.0), None, false)
}

#[test]
fn a_derived_model_is_differentiated_as_one_value() -> Result<()> {
    let model = mlp();
    let x = array![[1.0, -1.0], [0.5, 2.0]];
    let grads = tree::grad(|m: &Mlp| forward(m, &x))(&model)?;
    assert_eq!(grads.activation, "tanh", "skipped fields are copied");
    assert!(grads.layers[1].bias.is_none());
    // The same gradient through the flat form.
    let leaves = tree_flatten(&model);
    assert_eq!(leaves.len(), 4);
    let flat =
        grad(|v: &[Array]| forward(&tree_unflatten(&model, v.to_vec()).unwrap(), &x))(&leaves)?;
    for (tree_leaf, flat_leaf) in tree_flatten(&grads).iter().zip(&flat) {
        assert_eq!(tree_leaf.shape(), flat_leaf.shape());
        assert_eq!(tree_leaf.to_vec::<f32>()?, flat_leaf.to_vec::<f32>()?);
    }
    let (value, _) = tree::value_and_grad(|m: &Mlp| forward(m, &x))(&model)?;
    assert_eq!(value.item::<f32>()?, forward(&model, &x).item::<f32>()?);
    Ok(())
}

#[test]
fn maps_tuples_and_tuple_structs_are_trees() -> Result<()> {
    let hash: HashMap<String, Array> =
        HashMap::from([("b".into(), array![1.0]), ("a".into(), array![2.0])]);
    let btree: BTreeMap<String, Array> = hash.clone().into_iter().collect();
    // Both maps flatten in key order.
    for leaves in [tree_flatten(&hash), tree_flatten(&btree)] {
        assert_eq!(leaves[0].item::<f32>()?, 2.0);
        assert_eq!(leaves[1].item::<f32>()?, 1.0);
    }
    let grads =
        tree::grad(|m: &HashMap<String, Array>| ops::sum(&(&m["a"] * &m["b"] * 3.0), None, false))(
            &hash,
        )?;
    assert_eq!(
        (grads["a"].item::<f32>()?, grads["b"].item::<f32>()?),
        (3.0, 6.0)
    );
    let pair = Pair(array![1.0, 2.0], array![3.0]);
    let g = tree::grad(|p: &Pair| ops::sum(&(&p.0 * &p.1), None, false))(&pair)?;
    assert_eq!(g.0.to_vec::<f32>()?, [3.0, 3.0]);
    assert_eq!(g.1.to_vec::<f32>()?, [3.0]);
    let (out, tangent) = tree::jvp(
        |t: &(Array, Array)| (ops::exp(&t.0), &t.0 * &t.1),
        &(array![0.0], array![2.0]),
        &(array![1.0], array![0.5]),
    )?;
    assert_eq!(out.0.item::<f32>()?, 1.0);
    // d(a·b) = da·b + a·db = 1·2 + 0·0.5.
    assert_eq!(
        (tangent.0.item::<f32>()?, tangent.1.item::<f32>()?),
        (1.0, 2.0)
    );
    Ok(())
}

#[test]
fn rebuilding_from_the_wrong_number_of_leaves_is_an_error() {
    let model = mlp();
    let error = tree_unflatten(&model, vec![array![1.0]])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("[tree]") && error.contains("1 leaves for a tree of 4"),
        "{error}"
    );
}

#[test]
fn vjp_and_vmap_take_and_return_trees() -> Result<()> {
    let model = mlp();
    let x = array![[1.0, -1.0]];
    // vjp of a tree-valued function: one cotangent per output leaf.
    let (outputs, cotangents) = tree::vjp(
        |m: &Mlp| (forward(m, &x), ops::sum(&m.layers[0].weight, None, false)),
        &model,
        &(Array::scalar(1.0f32), Array::scalar(2.0f32)),
    )?;
    assert_eq!(outputs.0.item::<f32>()?, forward(&model, &x).item::<f32>()?);
    let through_grad =
        tree::grad(|m: &Mlp| forward(m, &x) + ops::sum(&m.layers[0].weight, None, false) * 2.0)(
            &model,
        )?;
    for (a, b) in tree_flatten(&cotangents)
        .iter()
        .zip(tree_flatten(&through_grad))
    {
        assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    }
    // vmap over a batch of inputs held in a map.
    let batch: BTreeMap<String, Array> = BTreeMap::from([
        ("x".into(), array![[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
        ("y".into(), array![[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
    ]);
    let dots = tree::vmap(
        |m: &BTreeMap<String, Array>| vec![ops::sum(&(&m["x"] * &m["y"]), None, false)],
        Some(0),
        Some(0),
    )(&batch)?;
    assert_eq!(dots[0].to_vec::<f32>()?, [1.0, 4.0, 11.0]);
    Ok(())
}

#[test]
fn compile_traces_once_per_tree_structure_and_returns_trees() -> Result<()> {
    use std::cell::Cell;
    use std::rc::Rc;
    let traces = Rc::new(Cell::new(0));
    let counter = traces.clone();
    let x = array![[1.0, -1.0], [0.5, 2.0]];
    let inner = x.clone();
    let step = tree::compile(move |m: &Mlp| {
        counter.set(counter.get() + 1);
        let loss = forward(m, &inner);
        (loss, m.layers.len() as f32 * &m.scale.0)
    });

    let model = mlp();
    let (loss, scaled) = step(&model)?;
    assert_eq!(loss.item::<f32>()?, forward(&model, &x).item::<f32>()?);
    assert_eq!(scaled.to_vec::<f32>()?, [4.0]);
    assert_eq!(step(&model)?.1.to_vec::<f32>()?, [4.0]);
    assert_eq!(
        traces.get(),
        1,
        "same structure, shapes and dtypes: replayed"
    );

    // New leaf values: replayed, with the new values' results.
    let mut changed = mlp();
    changed.scale.0 = array![3.0];
    assert_eq!(step(&changed)?.1.to_vec::<f32>()?, [6.0]);
    assert_eq!(traces.get(), 1);

    // A bias dropped, a layer fewer, another shape: each a new trace, each right.
    let mut no_bias = mlp();
    no_bias.layers[0].bias = None;
    assert_eq!(
        step(&no_bias)?.0.item::<f32>()?,
        forward(&no_bias, &x).item::<f32>()?
    );
    assert_eq!(traces.get(), 2);
    let mut shorter = mlp();
    shorter.layers.truncate(1);
    shorter.layers[0].weight = array![[1.0], [2.0]];
    shorter.layers[0].bias = Some(array![0.5]);
    let (loss, scaled) = step(&shorter)?;
    assert_eq!(loss.item::<f32>()?, forward(&shorter, &x).item::<f32>()?);
    assert_eq!(scaled.to_vec::<f32>()?, [2.0]);
    assert_eq!(traces.get(), 3);
    assert_eq!(step(&model)?.1.to_vec::<f32>()?, [4.0]);
    assert_eq!(
        step(&no_bias)?.0.item::<f32>()?,
        forward(&no_bias, &x).item::<f32>()?
    );
    assert_eq!(traces.get(), 3, "every earlier signature is still cached");
    Ok(())
}

#[test]
fn compiled_maps_trace_again_for_other_keys() -> Result<()> {
    use std::cell::Cell;
    use std::rc::Rc;
    let traces = Rc::new(Cell::new(0));
    let counter = traces.clone();
    let total = tree::compile(move |p: &BTreeMap<String, Array>| {
        counter.set(counter.get() + 1);
        let mut sum = ops::zeros(&[], DType::F32);
        for (i, value) in p.values().enumerate() {
            sum = sum + value * (i + 1) as f64;
        }
        sum
    });
    let ab = BTreeMap::from([
        ("a".to_string(), array![1.0]),
        ("b".to_string(), array![10.0]),
    ]);
    let ba = BTreeMap::from([
        ("b".to_string(), array![1.0]),
        ("c".to_string(), array![10.0]),
    ]);
    assert_eq!(total(&ab)?.to_vec::<f32>()?, [21.0]);
    assert_eq!(total(&ba)?.to_vec::<f32>()?, [21.0]);
    assert_eq!(traces.get(), 2);
    let one = BTreeMap::from([("a".to_string(), array![5.0])]);
    assert_eq!(total(&one)?.to_vec::<f32>()?, [5.0]);
    assert_eq!(traces.get(), 3);
    Ok(())
}

#[test]
fn leaves_are_named_by_path_as_mlx_names_parameters() {
    use nuvec::transforms::tree_flatten_named;
    let names: Vec<String> = tree_flatten_named(&mlp())
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        names,
        [
            "layers.0.weight",
            "layers.0.bias",
            "layers.1.weight",
            "scale.0"
        ]
    );
    let map = BTreeMap::from([("b".to_string(), Pair(array![1.0], array![2.0]))]);
    let names: Vec<String> = tree_flatten_named(&map)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["b.0", "b.1"]);
}

#[derive(Tree, Clone)]
struct WithState {
    weight: Array,
    #[tree(state)]
    state: nuvec::transforms::ModuleState,
}

#[test]
fn module_states_are_visited_with_their_paths_and_shape_the_structure() {
    let mut layers = vec![
        WithState {
            weight: array![1.0],
            state: Default::default(),
        },
        WithState {
            weight: array![2.0],
            state: Default::default(),
        },
    ];
    let mut seen = Vec::new();
    layers.visit_states("", &mut |path, state| {
        seen.push(path.to_string());
        state.training = false;
    });
    assert_eq!(seen, ["0", "1"]);
    assert!(layers.iter().all(|l| !l.state.training));
    let mut eval_key = String::new();
    layers.structure(&mut eval_key);
    layers[0].state.training = true;
    let mut train_key = String::new();
    layers.structure(&mut train_key);
    assert_ne!(eval_key, train_key, "the mode is part of the structure");
    assert_eq!(tree_flatten(&layers).len(), 2, "the state is not a leaf");
}
