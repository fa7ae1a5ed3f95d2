//! Every kernel source nuvec generates compiles through NVRTC, for Hopper (`compute_90`, the
//! H200) and Ampere (`compute_80`). NVRTC runs without a GPU: CI installs the
//! `nvidia-cuda-nvrtc` wheel (CUDA 13) and sets `NUVEC_REQUIRE_NVRTC=1`; elsewhere a missing
//! NVRTC is a visible skip.

use nuvec_cuda::compile::compile_uncached;
use nuvec_cuda::kernels::catalogue;
use nuvec_cuda::library::{require, Library};

/// Whether NVRTC is here; without it, a visible skip (or a failure when required).
fn nvrtc_or_skip(test: &str) -> bool {
    match require(Library::Nvrtc) {
        Ok(()) => true,
        Err(e) => {
            assert!(
                std::env::var_os("NUVEC_REQUIRE_NVRTC").is_none(),
                "{test}: NUVEC_REQUIRE_NVRTC is set but {e}"
            );
            nuvec_test_support::skip(&format!(
                "{test}: {e} (pip install nvidia-cuda-nvrtc; set NUVEC_REQUIRE_NVRTC=1 to make this a failure)"
            ));
            false
        }
    }
}

#[test]
fn every_generated_kernel_compiles_for_hopper_and_ampere() {
    if !nvrtc_or_skip("every_generated_kernel_compiles_for_hopper_and_ampere") {
        return;
    }
    let sources = catalogue();
    assert!(sources.len() > 500, "{} sources", sources.len());
    // One thread per architecture: the two cores of CI each compile one.
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = ["compute_90", "compute_80"]
            .map(|arch| {
                let sources = &sources;
                scope.spawn(move || {
                    let mut failures = Vec::new();
                    for source in sources {
                        match compile_uncached(source, arch) {
                            Ok(ptx) => assert!(
                                ptx.contains(".entry") && ptx.contains(&source.name),
                                "{}: no entry point in its PTX",
                                source.name
                            ),
                            Err(e) => failures.push(e.to_string()),
                        }
                    }
                    failures
                })
            })
            .into_iter()
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a compiling thread"))
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {} sources failed:\n{}",
        failures.len(),
        2 * sources.len(),
        failures.join("\n")
    );
}

#[test]
fn a_kernel_that_does_not_compile_is_an_error_with_nvrtcs_log() {
    if !nvrtc_or_skip("a_kernel_that_does_not_compile_is_an_error_with_nvrtcs_log") {
        return;
    }
    let broken = nuvec_cuda::kernels::Source {
        name: "broken".into(),
        text: "extern \"C\" __global__ void broken() { undeclared = 1; }".into(),
    };
    let error = compile_uncached(&broken, "compute_90")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("compiling the GPU kernel broken for compute_90")
            && error.contains("undeclared"),
        "{error}"
    );
}
