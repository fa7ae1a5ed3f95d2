//! A checkpoint's tensors: every `model*.safetensors` file of a folder, memory-mapped, each
//! tensor an [`Array`] over the mapped bytes (no copy) when its offset is aligned for its
//! dtype, as mlx-lm reads them. Models take their tensors by name, with the shape checked.

use crate::{Error, Result};
use memmap2::Mmap;
use nuvec_core::{ops, with_dtype, Array, DType, Element};
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
        // SAFETY: `Mapped::array` checked that `offset` is aligned for `T` and that
        // `len · size_of::<T>()` bytes from it lie inside the map, which lives as long as
        // `self`; the mapping is read-only, and every bit pattern is a valid `T` for the
        // numeric element types (bool is never mapped: `Array::from_owner` copies it).
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.offset).cast::<T>(), self.len)
        }
    }
}

impl<T: Element> Mapped<T> {
    /// The values in `segments` (byte ranges of `map`, in order) as one array of `shape`:
    /// in place when there is one segment aligned for `T` (unless `copy`), otherwise copied in
    /// one pass into aligned memory, after which the copied pages of the file are given back.
    fn array(map: &Arc<Mmap>, segments: &[(usize, usize)], shape: &[i32], copy: bool) -> Array {
        let width = size_of::<T>();
        if let (false, [(offset, bytes)]) = (copy, segments) {
            if T::DTYPE != DType::Bool && offset.is_multiple_of(align_of::<T>()) {
                let mapped = Mapped::<T> {
                    map: map.clone(),
                    offset: *offset,
                    len: bytes / width,
                    _type: std::marker::PhantomData,
                };
                return Array::from_owner(mapped, shape);
            }
        }
        // mlx.save_safetensors does not pad the header, so an MLX checkpoint's tensors are
        // usually not aligned: they are copied into aligned memory.
        let len: usize = segments.iter().map(|(_, bytes)| bytes / width).sum();
        let mut values: Vec<T> = Vec::with_capacity(len);
        // The file's pages are given back every few megabytes as they are copied, so a large
        // tensor is not resident twice (its pages and its copy) while it is read.
        let mut unreleased = segments.first().map_or(0, |first| first.0);
        for &(offset, bytes) in segments {
            for start in (offset..offset + bytes).step_by(RELEASE_EVERY) {
                let end = (start + RELEASE_EVERY).min(offset + bytes);
                copy_into(&mut values, &map[start..end], len);
                if end - unreleased >= RELEASE_EVERY {
                    release(map, unreleased, end - unreleased);
                    unreleased = end;
                }
            }
        }
        if let (Some(first), Some(last)) = (segments.first(), segments.last()) {
            release(map, first.0, last.0 + last.1 - first.0);
        }
        // The copy becomes the array's memory as it is: a second copy would have the tensor
        // resident twice for a moment (the embeddings' 272 MB of a 0.5B model doubled a
        // pipeline stage's peak).
        Array::from_owner(values, shape)
    }
}

/// How many bytes of a tensor are copied before the file's pages they came from are given
/// back.
const RELEASE_EVERY: usize = 8 << 20;

/// Appends the values in `from` (little-endian, whole values) to `values`, which has room for
/// `len` values in all.
fn copy_into<T: Element>(values: &mut Vec<T>, from: &[u8], len: usize) {
    let width = size_of::<T>();
    if T::DTYPE == DType::Bool || cfg!(target_endian = "big") {
        values.extend(from.chunks_exact(width).map(T::read_le));
        return;
    }
    let filled = values.len();
    let count = from.len() / width;
    assert!(filled + count <= len, "a tensor's segments exceed its size");
    // `from` holds whole values: `RELEASE_EVERY` and the segments are multiples of the width.
    // SAFETY: `values` has room for `filled + count` elements (checked above), apart from
    // `from`'s `count * width` bytes; any bits are a valid value of the numeric types copied
    // here (bool took the path above), and the file's little-endian order is this machine's.
    unsafe {
        std::ptr::copy_nonoverlapping(
            from.as_ptr(),
            values.as_mut_ptr().add(filled).cast::<u8>(),
            count * width,
        );
        values.set_len(filled + count);
    }
}

/// Gives back the pages of `map` wholly inside `offset..offset + len`, read and copied: they
/// would otherwise stay resident beside the copy. Reading them again (an in-place tensor
/// sharing a page) brings them back from the file, unchanged.
fn release(map: &Mmap, offset: usize, len: usize) {
    // The largest page size of the platforms served (Apple silicon's 16 KiB): rounding
    // inward to it is page-aligned on every one of them.
    const PAGE: usize = 16 << 10;
    let (start, end) = (offset.next_multiple_of(PAGE), (offset + len) / PAGE * PAGE);
    if end <= start {
        return;
    }
    #[cfg(unix)]
    // SAFETY: the mapping is private and read-only, so dropping its pages loses nothing:
    // any later read of them is served from the file, which is not modified while mapped
    // (see `add_file`).
    unsafe {
        let _ = map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start);
    }
}

/// A tensor not read yet: where its bytes lie in a mapped file.
struct Stored {
    map: Arc<Mmap>,
    offset: usize,
    dtype: DType,
    shape: Vec<i32>,
}

impl Stored {
    /// Part `index` of `parts` equal parts along `axis` (the caller checked that they are
    /// equal), reading only its bytes.
    fn part(&self, axis: usize, index: usize, parts: usize, copy: bool) -> Array {
        let dims: Vec<usize> = self.shape.iter().map(|&d| d as usize).collect();
        let width = self.dtype.size();
        let outer: usize = dims[..axis].iter().product();
        let inner: usize = dims[axis + 1..].iter().product::<usize>() * width;
        let along = dims[axis] / parts;
        let segments: Vec<(usize, usize)> = (0..outer)
            .map(|o| {
                let first = o * dims[axis] + index * along;
                (self.offset + first * inner, along * inner)
            })
            .filter(|&(_, bytes)| bytes > 0)
            .collect();
        let mut shape = self.shape.clone();
        shape[axis] = along as i32;
        with_dtype!(
            self.dtype,
            T,
            Mapped::<T>::array(&self.map, &segments, &shape, copy)
        )
    }
}

/// A checkpoint's tensor, or one a model's sanitizing built.
enum Tensor {
    Stored(Stored),
    Built(Array),
}

impl Tensor {
    fn shape(&self) -> &[i32] {
        match self {
            Tensor::Stored(stored) => &stored.shape,
            Tensor::Built(array) => array.shape(),
        }
    }

    fn whole(self, copy: bool) -> Array {
        match self {
            Tensor::Stored(stored) => {
                let elements: usize = stored.shape.iter().map(|&d| d as usize).product();
                let segment = [(stored.offset, elements * stored.dtype.size())];
                let segments = &segment[..usize::from(elements > 0)];
                let (map, shape) = (&stored.map, &stored.shape);
                with_dtype!(
                    stored.dtype,
                    T,
                    Mapped::<T>::array(map, segments, shape, copy)
                )
            }
            Tensor::Built(array) => array,
        }
    }

    /// Part `index` of `parts` (at least 2) along `axis`.
    fn part(self, axis: usize, index: usize, parts: usize, copy: bool) -> Array {
        match self {
            Tensor::Stored(stored) => stored.part(axis, index, parts, copy),
            Tensor::Built(array) => {
                let along = array.shape()[axis] / parts as i32;
                let mut start = vec![0; array.ndim()];
                let mut stop = array.shape().to_vec();
                start[axis] = along * index as i32;
                stop[axis] = start[axis] + along;
                ops::slice(&array, &start, &stop, &vec![1; array.ndim()])
            }
        }
    }
}

/// The tensors of a checkpoint, by name.
#[derive(Default)]
pub struct Weights {
    tensors: BTreeMap<String, (Tensor, PathBuf)>,
    /// The mapped files.
    maps: Vec<Arc<Mmap>>,
    /// Whether every tensor taken is copied out of its file (see [`Weights::copy_out`]).
    copy: bool,
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Weights({} tensors)", self.tensors.len())
    }
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
        self.maps.push(map.clone());
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
            let offset = view.data().as_ptr() as usize - map.as_ptr() as usize;
            let stored = Stored {
                map: map.clone(),
                offset,
                dtype,
                shape,
            };
            if let Some((_, first)) = self.tensors.get(&name) {
                return Err(Error::load(
                    file,
                    format!("tensor {name} is also in {}", first.display()),
                ));
            }
            self.tensors
                .insert(name, (Tensor::Stored(stored), file.to_path_buf()));
        }
        Ok(())
    }

    /// Tensors built in memory (tests, conversions).
    pub fn from_arrays(arrays: impl IntoIterator<Item = (String, Array)>) -> Weights {
        Weights {
            tensors: arrays
                .into_iter()
                .map(|(k, v)| (k, (Tensor::Built(v), PathBuf::from("<memory>"))))
                .collect(),
            ..Weights::default()
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

    /// The shape of tensor `name`, if there is one.
    pub fn shape(&self, name: &str) -> Option<&[i32]> {
        self.tensors.get(name).map(|(tensor, _)| tensor.shape())
    }

    /// Takes the tensor `name` out, checking its shape (`None` in `shape` accepts any size).
    pub fn take(&mut self, name: &str, shape: &[Option<i32>]) -> Result<Array> {
        self.take_part(name, shape, 0, 0, 1)
    }

    /// Takes part `index` of `parts` equal parts of tensor `name` along `axis` (a rank's
    /// shard), reading only that part's bytes from the file; `shape` is the whole tensor's.
    pub fn take_part(
        &mut self,
        name: &str,
        shape: &[Option<i32>],
        axis: usize,
        index: usize,
        parts: usize,
    ) -> Result<Array> {
        let (tensor, file) = self
            .tensors
            .remove(name)
            .ok_or_else(|| Error::load("<weights>", format!("tensor {name} is missing")))?;
        let fits = tensor.shape().len() == shape.len()
            && tensor
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
                    tensor.shape(),
                    want.join(", ")
                ),
            ));
        }
        let along = tensor.shape().get(axis).copied().unwrap_or(1);
        if parts == 0 || index >= parts || along % parts as i32 != 0 {
            return Err(Error::load(
                file,
                format!(
                    "tensor {name} of shape {:?} does not split into {parts} equal parts along axis {axis}",
                    tensor.shape()
                ),
            ));
        }
        Ok(if parts == 1 {
            tensor.whole(self.copy)
        } else {
            tensor.part(axis, index, parts, self.copy)
        })
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

    /// Removes, unread, every tensor whose name starts with `prefix` (the layers of other
    /// pipeline stages).
    pub fn discard_prefix(&mut self, prefix: &str) {
        self.tensors.retain(|name, _| !name.starts_with(prefix));
    }

    /// Adds or replaces a tensor (for a model's sanitizing, e.g. stacking experts).
    pub fn insert(&mut self, name: String, array: Array) {
        self.tensors
            .insert(name, (Tensor::Built(array), PathBuf::from("<sanitized>")));
    }

    /// Copies every tensor taken from now on out of its file instead of using it in place,
    /// and lets [`Weights::finish`] give back every page of the files. For a rank that keeps
    /// a share of the checkpoint: a page of the file holding bytes of its share and of
    /// others' would otherwise stay resident, and the kernel maps a file's pages in groups
    /// (large folios: up to 2 MiB on Linux), so a share used in place held about 20% more
    /// than its own bytes (`docs/performance.md`, "Across ranks").
    pub fn copy_out(&mut self) {
        self.copy = true;
    }

    /// The names nobody took: a checkpoint with tensors the model does not know is refused,
    /// as MLX's `load_weights(strict=True)` does.
    pub fn finish(self, dir: &Path) -> Result<()> {
        if self.copy {
            // Nothing is used in place: no page of the files is needed any more.
            for map in &self.maps {
                release(map, 0, map.len());
            }
        }
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
