//! [`Module`]: what every model gets from being a tree of arrays. Its parameters are its
//! leaves, named by path as MLX names them (`layers.0.weight`); the `ModuleState` of each
//! layer (a `#[tree(state)]` field) holds its training mode and frozen parameters.
//!
//! A model is a plain struct with `#[derive(Tree)]`: every method here comes with it.

use nuvec_core::transforms::{tree_flatten_named, tree_unflatten, ModuleState, Tree};
use nuvec_core::{Array, Error, Result};
use std::collections::BTreeMap;

/// A module's arrays by name.
pub type Parameters = BTreeMap<String, Array>;

#[track_caller]
fn module_error(op: &str, reason: String) -> Error {
    Error::invalid(op, reason, std::panic::Location::caller())
}

/// What every tree of arrays can do as a neural-network module.
pub trait Module: Tree {
    /// Every parameter by name, frozen or not.
    fn parameters(&self) -> Parameters {
        tree_flatten_named(self).into_iter().collect()
    }

    /// The parameters that are not frozen: what training differentiates and updates.
    fn trainable_parameters(&self) -> Parameters
    where
        Self: Clone,
    {
        let frozen = frozen_paths(self);
        tree_flatten_named(self)
            .into_iter()
            .filter(|(name, _)| !is_frozen(name, &frozen))
            .collect()
    }

    /// Replaces the parameters named in `parameters` (a subset is fine, as MLX's `update`);
    /// a name the module does not have, or an array of another shape, is an error naming it.
    #[track_caller]
    fn update(&mut self, parameters: &Parameters) -> Result<()> {
        let mut named = tree_flatten_named(self);
        let known: std::collections::HashSet<&str> =
            named.iter().map(|(name, _)| name.as_str()).collect();
        if let Some(unknown) = parameters.keys().find(|k| !known.contains(k.as_str())) {
            return Err(module_error(
                "update",
                format!("the module has no parameter {unknown:?}"),
            ));
        }
        for (name, value) in named.iter_mut() {
            if let Some(new) = parameters.get(name.as_str()) {
                if new.shape() != value.shape() {
                    return Err(module_error(
                        "update",
                        format!(
                            "parameter {name:?} has shape {:?}, the update {:?}",
                            value.shape(),
                            new.shape()
                        ),
                    ));
                }
                *value = new.clone();
            }
        }
        *self = tree_unflatten(self, named.into_iter().map(|(_, a)| a).collect())?;
        Ok(())
    }

    /// Freezes every parameter of this module and the modules in it.
    fn freeze(&mut self) {
        self.visit_states("", &mut |_, state| state.frozen_all = true);
    }

    /// Freezes the parameters with these local names (`"weight"`, `"bias"`) in this module and
    /// the modules in it.
    fn freeze_keys(&mut self, keys: &[&str]) {
        self.visit_states("", &mut |_, state| {
            state.frozen.extend(keys.iter().map(|k| k.to_string()))
        });
    }

    /// Unfreezes every parameter of this module and the modules in it.
    fn unfreeze(&mut self) {
        self.visit_states("", &mut |_, state| {
            state.frozen_all = false;
            state.frozen.clear();
        });
    }

    /// Training mode (`true`, the default) or evaluation mode, here and in every module in it.
    fn train(&mut self, training: bool) {
        self.visit_states("", &mut |_, state| state.training = training);
    }

    /// Evaluation mode: `train(false)`.
    fn eval_mode(&mut self) {
        self.train(false);
    }

    /// Whether the module is in training mode (a module without state is).
    fn is_training(&self) -> bool
    where
        Self: Clone,
    {
        let mut training = true;
        let mut copy = self.clone();
        copy.visit_states("", &mut |_, state| training &= state.training);
        training
    }

    /// Number of scalars in all parameters.
    fn num_parameters(&self) -> usize {
        tree_flatten_named(self).iter().map(|(_, a)| a.size()).sum()
    }
}

impl<T: Tree> Module for T {}

/// The frozen parts of `module`: for each module state, its path and what it freezes.
fn frozen_paths<M: Tree + Clone>(module: &M) -> Vec<(String, ModuleState)> {
    let mut copy = module.clone();
    let mut found = Vec::new();
    copy.visit_states("", &mut |path, state| {
        if state.frozen_all || !state.frozen.is_empty() {
            found.push((path.to_string(), state.clone()));
        }
    });
    found
}

/// Whether parameter `name` is frozen by the module that holds it: the state with the
/// longest path above it.
fn is_frozen(name: &str, frozen: &[(String, ModuleState)]) -> bool {
    frozen
        .iter()
        .filter_map(|(path, state)| {
            let local = if path.is_empty() {
                Some(name)
            } else {
                name.strip_prefix(path.as_str())
                    .and_then(|rest| rest.strip_prefix('.'))
            }?;
            Some((path.len(), state, local))
        })
        .max_by_key(|(len, _, _)| *len)
        .is_some_and(|(_, state, local)| state.frozen_all || state.frozen.contains(local))
}
