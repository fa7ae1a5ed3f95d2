//! A checkpoint's tensors: every `model*.safetensors` file of a folder, memory-mapped, each
//! tensor an [`Array`] over the mapped bytes (no copy) when its offset is aligned for its
//! dtype, as mlx-lm reads them. Models take their tensors by name, with the shape checked.

use crate::{Error, Result};
use memmap2::Mmap;
use nuvec_core::{with_dtype, Array, DType, Element};
use nuvec_nn::dtype_from_safetensors as nuvec_dtype;
use safetensors::tensor::SafeTensors;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One tensor's typed values inside a mapped file.
struct Mapped<T> {
    map: Arc<Mmap>,
    offset: usize,
    len: usize,
    _type: std::marker::PhantomData<T>,
}

impl<T: Element> AsRef<[T]> for Mapped<T> {
    fn as_ref(&self) -> &[T] {
        // SAFETY: `Mapped::new` checked that `offset` is aligned for `T` and that
        // `len · size_of::<T>()` bytes from it lie inside the map, which lives as long as
        // `self`; the mapping is read-only, and every bit pattern is a valid `T` for the
        // numeric element types (bool is never mapped: `Array::from_owner` copies it).
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.offset).cast::<T>(), self.len)
        }
    }
}

impl<T: Element> Mapped<T> {
    /// The tensor at `bytes` (a slice of `map`) as an array in place, or copied when its
    /// offset is not aligned for `T`.
    fn array(map: &Arc<Mmap>, bytes: &[u8], shape: &[i32]) -> Array {
        let offset = bytes.as_ptr() as usize - map.as_ptr() as usize;
        let width = size_of::<T>();
        let len = bytes.len() / width;
        if T::DTYPE != DType::Bool && offset.is_multiple_of(align_of::<T>()) {
            let mapped = Mapped::<T> {
                map: map.clone(),
                offset,
                len,
                _type: std::marker::PhantomData,
            };
            return Array::from_owner(mapped, shape);
        }
        // mlx.save_safetensors does not pad the header, so an MLX checkpoint's tensors are
        // usually not aligned: they are copied, in one pass, into aligned memory.
        if T::DTYPE == DType::Bool || cfg!(target_endian = "big") {
            let values: Vec<T> = bytes.chunks_exact(width).map(T::read_le).collect();
            return Array::from_vec(values, shape);
        }
        let mut values: Vec<T> = Vec::with_capacity(len);
        // SAFETY: `values` has room for `len` elements, that is `len · width` bytes, which
        // `bytes` holds (safetensors checked the tensor's extent); the two do not overlap;
        // every bit pattern is a valid value of the numeric types copied here (bool takes
        // the path above), and the file's little-endian bytes are this machine's order.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                values.as_mut_ptr().cast::<u8>(),
                len * width,
            );
            values.set_len(len);
        }
        Array::from_vec(values, shape)
    }
}

/// The tensors of a checkpoint, by name.
#[derive(Debug, Default)]
pub struct Weights {
    tensors: BTreeMap<String, (Array, PathBuf)>,
}

impl Weights {
    /// Maps every `model*.safetensors` file in `dir` (as mlx-lm: the index is not needed).
    pub fn open(dir: &Path) -> Result<Weights> {
        let entries = std::fs::read_dir(dir).map_err(|e| Error::load(dir, e.to_string()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.starts_with("model") && name.ends_with(".safetensors")
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::load(
                dir,
                "no weights: expected model.safetensors or model-*-of-*.safetensors",
            ));
        }
        let mut weights = Weights::default();
        for file in files {
            weights.add_file(&file)?;
        }
        Ok(weights)
    }

    fn add_file(&mut self, file: &Path) -> Result<()> {
        let handle = std::fs::File::open(file).map_err(|e| Error::load(file, e.to_string()))?;
        // SAFETY: the file is mapped read-only; like every reader of memory-mapped weights
        // (MLX included) we rely on it not being truncated or rewritten while in use.
        let map = unsafe { Mmap::map(&handle) }.map_err(|e| Error::load(file, e.to_string()))?;
        let map = Arc::new(map);
        let parsed = SafeTensors::deserialize(&map[..]).map_err(|e| {
            Error::load(
                file,
                format!("not a readable safetensors file ({e}); is it truncated?"),
            )
        })?;
        for (name, view) in parsed.tensors() {
            let dtype = nuvec_dtype(view.dtype()).ok_or_else(|| {
                Error::load(
                    file,
                    format!("tensor {name} has unsupported dtype {:?}", view.dtype()),
                )
            })?;
            let shape: Vec<i32> = view.shape().iter().map(|&d| d as i32).collect();
            let array = with_dtype!(dtype, T, Mapped::<T>::array(&map, view.data(), &shape));
            if let Some((_, first)) = self.tensors.get(&name) {
                return Err(Error::load(
                    file,
                    format!("tensor {name} is also in {}", first.display()),
                ));
            }
            self.tensors.insert(name, (array, file.to_path_buf()));
        }
        Ok(())
    }

    /// Tensors built in memory (tests, conversions).
    pub fn from_arrays(arrays: impl IntoIterator<Item = (String, Array)>) -> Weights {
        Weights {
            tensors: arrays
                .into_iter()
                .map(|(k, v)| (k, (v, PathBuf::from("<memory>"))))
                .collect(),
        }
    }

    /// Whether a tensor named `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The names of every tensor, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Takes the tensor `name` out, checking its shape (`None` in `shape` accepts any size).
    pub fn take(&mut self, name: &str, shape: &[Option<i32>]) -> Result<Array> {
        let (array, file) = self
            .tensors
            .remove(name)
            .ok_or_else(|| Error::load("<weights>", format!("tensor {name} is missing")))?;
        let fits = array.ndim() == shape.len()
            && array
                .shape()
                .iter()
                .zip(shape)
                .all(|(&d, want)| want.is_none_or(|w| w == d));
        if !fits {
            let want: Vec<String> = shape
                .iter()
                .map(|d| d.map_or("_".to_string(), |d| d.to_string()))
                .collect();
            return Err(Error::load(
                file,
                format!(
                    "tensor {name} has shape {:?}, expected [{}]",
                    array.shape(),
                    want.join(", ")
                ),
            ));
        }
        Ok(array)
    }

    /// Takes `name` if present.
    pub fn take_optional(&mut self, name: &str, shape: &[Option<i32>]) -> Result<Option<Array>> {
        if self.contains(name) {
            self.take(name, shape).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Removes a tensor without using it (for names a model drops, as mlx-lm's `sanitize`).
    pub fn discard(&mut self, name: &str) {
        self.tensors.remove(name);
    }

    /// Adds or replaces a tensor (for a model's sanitizing, e.g. stacking experts).
    pub fn insert(&mut self, name: String, array: Array) {
        self.tensors
            .insert(name, (array, PathBuf::from("<sanitized>")));
    }

    /// The names nobody took: a checkpoint with tensors the model does not know is refused,
    /// as MLX's `load_weights(strict=True)` does.
    pub fn finish(self, dir: &Path) -> Result<()> {
        if self.tensors.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = self.tensors.keys().map(String::as_str).take(5).collect();
        Err(Error::load(
            dir,
            format!(
                "{} tensors the model does not use, e.g. {}",
                self.tensors.len(),
                names.join(", ")
            ),
        ))
    }
}
