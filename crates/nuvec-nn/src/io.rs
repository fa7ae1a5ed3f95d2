//! Weights as safetensors files, with MLX's parameter names, so that files written by
//! `mlx.nn.Module.save_weights` load here and ours load in MLX.

use crate::module::{Module, Parameters};
use nuvec_core::{with_dtype, Array, DType, Element, Error, Result};
use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

fn io_error(op: &str, path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::Io {
        op: op.to_string(),
        reason: format!("{}: {reason}", path.display()),
    }
}

fn safetensors_dtype(dtype: DType) -> Dtype {
    match dtype {
        DType::Bool => Dtype::BOOL,
        DType::U8 => Dtype::U8,
        DType::U16 => Dtype::U16,
        DType::U32 => Dtype::U32,
        DType::U64 => Dtype::U64,
        DType::I8 => Dtype::I8,
        DType::I16 => Dtype::I16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
    }
}

/// nuvec's dtype of a safetensors dtype, if nuvec has it (not the 8-bit floats).
pub fn nuvec_dtype(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::BOOL => DType::Bool,
        Dtype::U8 => DType::U8,
        Dtype::U16 => DType::U16,
        Dtype::U32 => DType::U32,
        Dtype::U64 => DType::U64,
        Dtype::I8 => DType::I8,
        Dtype::I16 => DType::I16,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        _ => return None,
    })
}

/// An evaluated array's little-endian bytes, as safetensors stores them.
struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl Tensor {
    fn of(array: &Array) -> Result<Tensor> {
        let dtype = array.dtype();
        let width = dtype.size();
        let bytes = with_dtype!(dtype, T, {
            let values = array.to_vec::<T>()?;
            let mut bytes = vec![0u8; values.len() * width];
            for (value, out) in values.into_iter().zip(bytes.chunks_exact_mut(width)) {
                value.write_le(out);
            }
            bytes
        });
        Ok(Tensor {
            dtype,
            shape: array.shape().iter().map(|&d| d as usize).collect(),
            bytes,
        })
    }
}

impl View for &Tensor {
    fn dtype(&self) -> Dtype {
        safetensors_dtype(self.dtype)
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// Writes `arrays` to `path` as a safetensors file, with `metadata` in its header (MLX
/// writes `{"format": "mlx"}`).
pub fn save_safetensors(
    path: impl AsRef<Path>,
    arrays: &Parameters,
    metadata: &HashMap<String, String>,
) -> Result<()> {
    let path = path.as_ref();
    let tensors: Vec<(String, Tensor)> = arrays
        .iter()
        .map(|(name, array)| Ok((name.clone(), Tensor::of(array)?)))
        .collect::<Result<_>>()?;
    let views = tensors.iter().map(|(name, tensor)| (name.as_str(), tensor));
    safetensors::serialize_to_file(views, Some(metadata.clone()), path)
        .map_err(|e| io_error("save_safetensors", path, e))
}

/// The arrays of the safetensors file at `path`, and its header's metadata.
pub fn load_safetensors(path: impl AsRef<Path>) -> Result<(Parameters, HashMap<String, String>)> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_error("load_safetensors", path, e))?;
    let file =
        SafeTensors::deserialize(&bytes).map_err(|e| io_error("load_safetensors", path, e))?;
    let (_, header) =
        SafeTensors::read_metadata(&bytes).map_err(|e| io_error("load_safetensors", path, e))?;
    let mut arrays = Parameters::new();
    for (name, view) in file.tensors() {
        let dtype = nuvec_dtype(view.dtype()).ok_or_else(|| {
            io_error(
                "load_safetensors",
                path,
                format!(
                    "tensor {name:?} has dtype {:?}, which nuvec has not",
                    view.dtype()
                ),
            )
        })?;
        let shape: Vec<i32> = view.shape().iter().map(|&d| d as i32).collect();
        let width = dtype.size();
        let array = with_dtype!(dtype, T, {
            let values: Vec<T> = view.data().chunks_exact(width).map(T::read_le).collect();
            Array::from_vec(values, &shape)
        });
        arrays.insert(name, array);
    }
    Ok((arrays, header.metadata().clone().unwrap_or_default()))
}

/// Saving and loading a module's weights.
pub trait Weights: Module {
    /// Writes every parameter to `path` (safetensors, MLX's names and metadata).
    fn save_weights(&self, path: impl AsRef<Path>) -> Result<()> {
        let metadata = HashMap::from([("format".to_string(), "mlx".to_string())]);
        save_safetensors(path, &self.parameters(), &metadata)
    }

    /// Replaces every parameter with the file's. A missing or extra name, or another shape,
    /// is an error naming it (MLX's `load_weights(strict=True)`); dtypes are converted.
    fn load_weights(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let (arrays, _) = load_safetensors(path)?;
        let ours = self.parameters();
        if let Some(missing) = ours.keys().find(|k| !arrays.contains_key(*k)) {
            return Err(io_error(
                "load_weights",
                path,
                format!("the file has no {missing:?}"),
            ));
        }
        let converted: Parameters = arrays
            .into_iter()
            .map(|(name, array)| {
                let dtype = ours.get(&name).map_or_else(|| array.dtype(), Array::dtype);
                (name, array.astype(dtype))
            })
            .collect();
        self.update(&converted)
    }
}

impl<M: Module> Weights for M {}
