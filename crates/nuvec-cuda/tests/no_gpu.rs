//! Without a GPU or its driver, asking for one is an error that says what is missing, never a
//! panic; with one, the device opens and says what it is.

#[test]
fn asking_for_a_gpu_says_what_is_missing_or_opens_it() {
    match nuvec_cuda::device_count() {
        Ok(count) if count > 0 => {
            let gpu = nuvec_cuda::gpu(0).expect("device 0 of those the driver shows");
            assert!(gpu.arch().starts_with("compute_"), "{gpu:?}");
            assert!(gpu.total_memory() > 0);
            let beyond = nuvec_cuda::gpu(count).unwrap_err().to_string();
            assert!(
                beyond.contains(&format!("no CUDA device {count}")),
                "{beyond}"
            );
        }
        Ok(_) => {
            let error = nuvec_cuda::gpu(0).unwrap_err().to_string();
            assert!(error.contains("no CUDA device 0"), "{error}");
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("the CUDA driver (libcuda) is not available"),
                "{text}"
            );
            assert!(text.contains("NUVEC_CUDA_LIBRARY"), "{text}");
            assert!(!nuvec_cuda::available());
            let reason = nuvec_cuda::unavailable_reason().unwrap();
            assert!(reason.contains("libcuda"), "{reason}");
            assert!(nuvec_cuda::gpu(0).is_err());
        }
    }
}
