//! Trees of arrays: values made of arrays (a model's parameters, an optimizer's state) that
//! the transforms take as one argument. A tree flattens to its leaves in a fixed order and
//! rebuilds from new leaves with the same structure.
//!
//! Implemented for [`Array`], `Vec`, `Option`, tuples of up to four, and string-keyed
//! `BTreeMap`/`HashMap` (leaves in key order); `#[derive(Tree)]` (crate `nuvec-macros`,
//! re-exported as `nuvec::transforms::Tree`) implements it for structs.

use crate::{Array, Error, Result};
use std::collections::{BTreeMap, HashMap};

/// A value made of arrays.
pub trait Tree: Sized {
    /// Appends the leaves, in the tree's order.
    fn flatten_into(&self, leaves: &mut Vec<Array>);
    /// A tree of this one's structure whose leaves are taken, in order, from `leaves`.
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self>;
    /// Appends a description of the structure, not of the leaves: two trees with the same
    /// description rebuild from each other's leaves. [`compile`] keys its traces by it.
    fn structure(&self, key: &mut String);
    /// Appends every leaf with its path under `prefix`: field names, indices and map keys
    /// joined by dots, as MLX names a module's parameters (`layers.0.weight`).
    fn flatten_named(&self, prefix: &str, leaves: &mut Vec<(String, Array)>);
    /// Calls `visit` with every [`ModuleState`] in the tree and the path of the struct that
    /// holds it (a derived struct's `#[tree(state)]` field). None by default.
    fn visit_states(&mut self, prefix: &str, visit: &mut dyn FnMut(&str, &mut ModuleState)) {
        let _ = (prefix, visit);
    }
}

/// The state a neural-network module carries besides its arrays: training or evaluation
/// mode, and which of its own parameters are frozen (left out of its trainable parameters).
/// A derived struct holds it in a field marked `#[tree(state)]`; it is part of the tree's
/// structure, so a compiled function traces again when the mode changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleState {
    /// Training mode (dropout active). Modules start in it, as MLX's do.
    pub training: bool,
    /// Every parameter of the module frozen.
    pub frozen_all: bool,
    /// The module's own parameters frozen by name (`weight`, `bias`).
    pub frozen: std::collections::BTreeSet<String>,
}

impl Default for ModuleState {
    fn default() -> ModuleState {
        ModuleState {
            training: true,
            frozen_all: false,
            frozen: Default::default(),
        }
    }
}

/// `prefix.name`, or `name` at the root: the path of a field, index or key.
pub fn join_path(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

fn too_few() -> Error {
    Error::Transform {
        transform: "tree",
        reason: "fewer leaves than the tree has".into(),
    }
}

impl Tree for Array {
    fn flatten_into(&self, leaves: &mut Vec<Array>) {
        leaves.push(self.clone());
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        leaves.next().ok_or_else(too_few)
    }
    fn structure(&self, key: &mut String) {
        key.push('a');
    }
    fn flatten_named(&self, prefix: &str, leaves: &mut Vec<(String, Array)>) {
        leaves.push((prefix.to_string(), self.clone()));
    }
}

impl<T: Tree> Tree for Vec<T> {
    fn flatten_into(&self, leaves: &mut Vec<Array>) {
        self.iter().for_each(|t| t.flatten_into(leaves));
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        self.iter().map(|t| t.rebuild(leaves)).collect()
    }
    fn structure(&self, key: &mut String) {
        key.push_str(&format!("[{};", self.len()));
        self.iter().for_each(|t| t.structure(key));
        key.push(']');
    }
    fn flatten_named(&self, prefix: &str, leaves: &mut Vec<(String, Array)>) {
        for (i, t) in self.iter().enumerate() {
            t.flatten_named(&join_path(prefix, &i.to_string()), leaves);
        }
    }
    fn visit_states(&mut self, prefix: &str, visit: &mut dyn FnMut(&str, &mut ModuleState)) {
        for (i, t) in self.iter_mut().enumerate() {
            t.visit_states(&join_path(prefix, &i.to_string()), visit);
        }
    }
}

impl<T: Tree> Tree for Option<T> {
    fn flatten_into(&self, leaves: &mut Vec<Array>) {
        if let Some(t) = self {
            t.flatten_into(leaves);
        }
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        self.as_ref().map(|t| t.rebuild(leaves)).transpose()
    }
    fn structure(&self, key: &mut String) {
        match self {
            Some(t) => {
                key.push('?');
                t.structure(key);
            }
            None => key.push('_'),
        }
    }
    fn flatten_named(&self, prefix: &str, leaves: &mut Vec<(String, Array)>) {
        if let Some(t) = self {
            t.flatten_named(prefix, leaves);
        }
    }
    fn visit_states(&mut self, prefix: &str, visit: &mut dyn FnMut(&str, &mut ModuleState)) {
        if let Some(t) = self {
            t.visit_states(prefix, visit);
        }
    }
}

impl<T: Tree> Tree for BTreeMap<String, T> {
    fn flatten_into(&self, leaves: &mut Vec<Array>) {
        self.values().for_each(|t| t.flatten_into(leaves));
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        self.iter()
            .map(|(k, t)| Ok((k.clone(), t.rebuild(leaves)?)))
            .collect()
    }
    fn structure(&self, key: &mut String) {
        map_structure(self.iter(), key);
    }
    fn flatten_named(&self, prefix: &str, leaves: &mut Vec<(String, Array)>) {
        for (name, t) in self {
            t.flatten_named(&join_path(prefix, name), leaves);
        }
    }
    fn visit_states(&mut self, prefix: &str, visit: &mut dyn FnMut(&str, &mut ModuleState)) {
        for (name, t) in self.iter_mut() {
            t.visit_states(&join_path(prefix, name), visit);
        }
    }
}

impl<T: Tree> Tree for HashMap<String, T> {
    fn flatten_into(&self, leaves: &mut Vec<Array>) {
        let mut keys: Vec<&String> = self.keys().collect();
        keys.sort();
        keys.into_iter().for_each(|k| self[k].flatten_into(leaves));
    }
    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        let mut keys: Vec<&String> = self.keys().collect();
        keys.sort();
        keys.into_iter()
            .map(|k| Ok((k.clone(), self[k].rebuild(leaves)?)))
            .collect()
    }
    fn structure(&self, key: &mut String) {
        let mut entries: Vec<(&String, &T)> = self.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        map_structure(entries.into_iter(), key);
    }
    fn flatten_named(&self, prefix: &str, leaves: &mut Vec<(String, Array)>) {
        let mut keys: Vec<&String> = self.keys().collect();
        keys.sort();
        for name in keys {
            self[name].flatten_named(&join_path(prefix, name), leaves);
        }
    }
    fn visit_states(&mut self, prefix: &str, visit: &mut dyn FnMut(&str, &mut ModuleState)) {
        let mut entries: Vec<(&String, &mut T)> = self.iter_mut().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        for (name, t) in entries {
            t.visit_states(&join_path(prefix, name), visit);
        }
    }
}

/// A map's structure: each key (length-prefixed, so that no key can mimic another's
/// description) and its value's structure, in key order.
fn map_structure<'a, T: Tree + 'a>(
    entries: impl Iterator<Item = (&'a String, &'a T)>,
    key: &mut String,
) {
    key.push('{');
    for (name, value) in entries {
        key.push_str(&format!("{}:{name}", name.len()));
        value.structure(key);
    }
    key.push('}');
}

macro_rules! tuple_tree {
    ($($name:ident $index:tt),+) => {
        impl<$($name: Tree),+> Tree for ($($name,)+) {
            fn flatten_into(&self, leaves: &mut Vec<Array>) {
                $(self.$index.flatten_into(leaves);)+
            }
            fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
                Ok(($(self.$index.rebuild(leaves)?,)+))
            }
            fn structure(&self, key: &mut String) {
                key.push('(');
                $(self.$index.structure(key);)+
                key.push(')');
            }
            fn flatten_named(&self, prefix: &str, leaves: &mut Vec<(String, Array)>) {
                $(self.$index.flatten_named(&join_path(prefix, stringify!($index)), leaves);)+
            }
            fn visit_states(
                &mut self,
                prefix: &str,
                visit: &mut dyn FnMut(&str, &mut ModuleState),
            ) {
                $(self.$index.visit_states(&join_path(prefix, stringify!($index)), visit);)+
            }
        }
    };
}
tuple_tree!(A 0);
tuple_tree!(A 0, B 1);
tuple_tree!(A 0, B 1, C 2);
tuple_tree!(A 0, B 1, C 2, D 3);

/// The leaves of `tree` with their paths (MLX's parameter names), in the tree's order.
///
/// ```
/// use nuvec_core::{array, transforms::tree_flatten_named};
/// let params = vec![(array![1.0], Some(array![2.0]))];
/// let names: Vec<String> = tree_flatten_named(&params).into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.0", "0.1"]);
/// ```
pub fn tree_flatten_named<T: Tree>(tree: &T) -> Vec<(String, Array)> {
    let mut leaves = Vec::new();
    tree.flatten_named("", &mut leaves);
    leaves
}

/// The leaves of `tree`, in order.
pub fn tree_flatten<T: Tree>(tree: &T) -> Vec<Array> {
    let mut leaves = Vec::new();
    tree.flatten_into(&mut leaves);
    leaves
}

/// A tree shaped like `template` with `leaves` (as many as it has) in place of its own.
pub fn tree_unflatten<T: Tree>(template: &T, leaves: Vec<Array>) -> Result<T> {
    let expected = tree_flatten(template).len();
    if leaves.len() != expected {
        return Err(Error::Transform {
            transform: "tree",
            reason: format!("{} leaves for a tree of {expected}", leaves.len()),
        });
    }
    template.rebuild(&mut leaves.into_iter())
}

mod transforms;
pub use transforms::{compile, grad, jvp, value_and_grad, vjp, vmap};
