//! Compiling kernel sources with NVRTC, once per source and architecture per process.

use crate::error::{CudaError, Result};
use crate::kernels::Source;
use crate::library::{require, Library};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// PTX texts by kernel name and architecture.
type Compiled = Mutex<HashMap<(String, String), Arc<String>>>;

/// PTX text compiled before, by kernel name and architecture.
fn compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(Mutex::default)
}

/// `source` compiled to PTX for `arch` (`compute_90`), from the cache after the first time.
/// Needs NVRTC, not a GPU.
pub fn compile(source: &Source, arch: &str) -> Result<Ptx> {
    let key = (source.name.clone(), arch.to_string());
    let cache = compiled();
    if let Some(ptx) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(Ptx::from_src(ptx.as_str()));
    }
    let ptx = compile_uncached(source, arch)?;
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, Arc::new(ptx.clone()));
    Ok(Ptx::from_src(ptx))
}

/// `source` compiled to PTX text for `arch`, every time.
pub fn compile_uncached(source: &Source, arch: &str) -> Result<String> {
    require(Library::Nvrtc)?;
    let options = CompileOptions {
        // No multiply-add contraction: every `a * b + c` rounds twice, as on the CPU and as the
        // unfused kernels do, so a fused chain keeps their bits.
        options: vec![
            format!("--gpu-architecture={arch}"),
            "--std=c++17".into(),
            "--fmad=false".into(),
        ],
        name: Some(format!("{}.cu", source.name)),
        ..CompileOptions::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(&source.text, options) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(CompileError::CompileError { log, .. }) => Err(CudaError::Compile {
            kernel: source.name.clone(),
            arch: arch.to_string(),
            log: log.to_string_lossy().into_owned(),
        }),
        Err(other) => Err(CudaError::Compile {
            kernel: source.name.clone(),
            arch: arch.to_string(),
            log: format!("{other}"),
        }),
    }
}
