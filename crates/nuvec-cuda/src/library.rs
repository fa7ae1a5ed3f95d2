//! Finding the CUDA libraries at run time: the one place in this crate that knows where they
//! live. The default build links none of them; each is loaded on first use from, in order,
//! the file its variable names (`NUVEC_CUDA_LIBRARY`, `NUVEC_NVRTC_LIBRARY`,
//! `NUVEC_CUBLAS_LIBRARY`, `NUVEC_CUBLASLT_LIBRARY`, `NUVEC_NCCL_LIBRARY`), the system's
//! library path, then the pip wheels' folders (CUDA 13's `nvidia/cu13/lib`, CUDA 12's
//! `nvidia/cuda_nvrtc/lib`, `nvidia/cublas/lib`, and `nvidia/nccl/lib`) in the active virtual
//! environment, `PYTHONPATH`, the `python3` on `PATH` and the usual site-packages, then
//! `/usr/local/cuda/lib64`. CUDA 13's files are tried before CUDA 12's. A library found by
//! path is kept loaded, so cudarc's own lookup by name finds it already there instead of
//! failing (or panicking) on a name search.

use crate::error::{CudaError, Result};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A library of the CUDA stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    /// The driver (`libcuda`), installed with the GPU's driver.
    Driver,
    /// The runtime compiler (`libnvrtc`).
    Nvrtc,
    /// cuBLAS.
    Cublas,
    /// cuBLASLt.
    CublasLt,
    /// NCCL.
    Nccl,
}

impl Library {
    /// The library's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Library::Driver => "the CUDA driver (libcuda)",
            Library::Nvrtc => "NVRTC (libnvrtc)",
            Library::Cublas => "cuBLAS (libcublas)",
            Library::CublasLt => "cuBLASLt (libcublasLt)",
            Library::Nccl => "NCCL (libnccl)",
        }
    }

    /// The variable naming the library's file.
    pub fn variable(self) -> &'static str {
        match self {
            Library::Driver => "NUVEC_CUDA_LIBRARY",
            Library::Nvrtc => "NUVEC_NVRTC_LIBRARY",
            Library::Cublas => "NUVEC_CUBLAS_LIBRARY",
            Library::CublasLt => "NUVEC_CUBLASLT_LIBRARY",
            Library::Nccl => "NUVEC_NCCL_LIBRARY",
        }
    }

    /// The file names tried, CUDA 13's first (each is one cudarc also looks up by name).
    fn file_names(self) -> &'static [&'static str] {
        match self {
            Library::Driver => &["libcuda.so.1", "libcuda.so"],
            Library::Nvrtc => &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
            Library::Cublas => &["libcublas.so.13", "libcublas.so.12", "libcublas.so"],
            Library::CublasLt => &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"],
            Library::Nccl => &["libnccl.so.2", "libnccl.so"],
        }
    }

    /// Where pip wheels put the library under a site-packages folder (CUDA 13's wheels share
    /// `nvidia/cu13/lib`; CUDA 12's have a folder each), and the toolkit's own folder.
    fn folders(self) -> &'static [&'static str] {
        match self {
            Library::Driver => &[],
            Library::Nvrtc => &["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"],
            Library::Cublas | Library::CublasLt => &["nvidia/cu13/lib", "nvidia/cublas/lib"],
            Library::Nccl => &["nvidia/nccl/lib", "nvidia/cu13/lib"],
        }
    }

    fn slot(self) -> &'static OnceLock<std::result::Result<PathBuf, String>> {
        static SLOTS: [OnceLock<std::result::Result<PathBuf, String>>; 5] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        &SLOTS[self as usize]
    }
}

/// Folders that may hold pip's packages: the virtual environment's, `PYTHONPATH`'s, those of
/// the `python3` on `PATH`, the user's and the system's.
fn site_packages() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(path) = std::env::var_os("PYTHONPATH") {
        roots.extend(std::env::split_paths(&path));
    }
    let mut prefixes: Vec<PathBuf> = Vec::new();
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        prefixes.push(PathBuf::from(venv));
    }
    // The environment of the `python3` first on `PATH` (a virtual environment not activated).
    if let Some(path) = std::env::var_os("PATH") {
        let python = std::env::split_paths(&path).find(|dir| dir.join("python3").exists());
        prefixes.extend(python.and_then(|dir| dir.parent().map(Path::to_path_buf)));
    }
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(Path::new(&home).join(".local"));
    }
    prefixes.extend(["/usr/local", "/usr"].map(PathBuf::from));
    for prefix in prefixes {
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("python3") {
                roots.push(entry.path().join("site-packages"));
                roots.push(entry.path().join("dist-packages"));
            }
        }
    }
    roots
}

/// Loads `path` and keeps it loaded for the life of the process.
fn keep(path: &Path) -> std::result::Result<(), String> {
    // SAFETY: loading a CUDA library runs its initialisers, which set up only its own state;
    // it is never unloaded, so nothing taken from it can outlive it.
    match unsafe { libloading::Library::new(path) } {
        Ok(library) => {
            std::mem::forget(library);
            Ok(())
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Finds and loads `library` (once per process): where it was found, or what was tried.
fn find(library: Library) -> std::result::Result<PathBuf, String> {
    if !cfg!(target_os = "linux") {
        return Err("nuvec's CUDA path runs on Linux".into());
    }
    let mut tried = Vec::new();
    if let Some(file) = std::env::var_os(library.variable()) {
        let path = PathBuf::from(file);
        return keep(&path).map(|()| path).map_err(|e| {
            format!(
                "{} names a library that does not load: {e}",
                library.variable()
            )
        });
    }
    for name in library.file_names() {
        match keep(Path::new(name)) {
            Ok(()) => return Ok(PathBuf::from(name)),
            Err(e) => tried.push(e),
        }
    }
    if !library.folders().is_empty() {
        let mut places: Vec<PathBuf> = site_packages()
            .iter()
            .flat_map(|root| library.folders().iter().map(move |f| root.join(f)))
            .collect();
        places.push(PathBuf::from("/usr/local/cuda/lib64"));
        for place in places {
            for name in library.file_names() {
                let path = place.join(name);
                if path.exists() {
                    match keep(&path) {
                        Ok(()) => return Ok(path),
                        Err(e) => tried.push(e),
                    }
                }
            }
        }
        tried.push(format!(
            "none in a pip wheel's {} (virtual environment, PYTHONPATH, site-packages) or /usr/local/cuda/lib64",
            library.folders().join(" or ")
        ));
    }
    Err(format!(
        "tried {} (set {} to its file); {}",
        library.file_names().join(", "),
        library.variable(),
        tried.join("; ")
    ))
}

/// Makes sure `library` is loaded, loading it the first time.
pub fn require(library: Library) -> Result<()> {
    match library.slot().get_or_init(|| find(library)) {
        Ok(_) => Ok(()),
        Err(reason) => Err(CudaError::Missing {
            library: library.name(),
            reason: reason.clone(),
        }),
    }
}

/// Where `library` was loaded from, if it loads.
pub fn location(library: Library) -> Option<PathBuf> {
    library
        .slot()
        .get_or_init(|| find(library))
        .as_ref()
        .ok()
        .cloned()
}
