//! GPU kernels' CUDA C, compiled as host C++ with `host/cuda_on_host.h` (each block's
//! threads as OS threads meeting at one barrier) and run on the CPU against `nuvec-cpu`'s
//! results, so their indexing, bit unpacking, folds, scans and sorting networks are checked where no
//! GPU is (CI). The GPU tests run the same kernels on a device. Needs `g++` (C++20); without it a
//! visible skip, or a failure with `NUVEC_REQUIRE_HOST_CXX=1` (which CI sets).

mod elementwise;
mod host;
mod quantized;
mod reduce;
mod scan;
mod scatter;
mod sort;
