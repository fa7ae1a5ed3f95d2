// Just enough of CUDA's execution model to run nuvec's generated kernels on the CPU, for the
// tests in `kernels_on_the_cpu.rs`: each block's threads are OS threads meeting at one
// barrier for `__syncthreads()`, blocks run one after another (so a block's `__shared__`
// arrays, made `static`, are its own while it runs). Slow, but the kernels' index arithmetic,
// bit unpacking and folds run exactly as written.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

// CUDA's math library names the C++ overloads without `std::`.
using std::copysign;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct nv_dim3 {
    unsigned int x, y, z;
};
static thread_local nv_dim3 threadIdx, blockIdx;
static nv_dim3 blockDim, gridDim;
static std::barrier<>* nv_block_barrier;
#define __syncthreads() nv_block_barrier->arrive_and_wait()

inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned int __float_as_uint(float f) { unsigned int i; std::memcpy(&i, &f, 4); return i; }
template <class T> T atomicExch(T* at, T value) { return __atomic_exchange_n(at, value, __ATOMIC_SEQ_CST); }

// Warp shuffles: each warp's threads meet at the warp's own barrier, around an exchange of
// their values through a per-thread slot (every lane of a warp calls a shuffle together, as
// the kernels' full masks promise).
static std::vector<std::unique_ptr<std::barrier<>>> nv_warp_barriers;
alignas(16) static unsigned char nv_lanes[1024][16];
template <class T> T __shfl_down_sync(unsigned int, T value, int offset) {
    static_assert(sizeof(T) <= 16, "a shuffled value fits a slot");
    unsigned int t = threadIdx.x, lane = t & 31u;
    std::barrier<>& warp = *nv_warp_barriers[t >> 5];
    std::memcpy(nv_lanes[t], &value, sizeof(T));
    warp.arrive_and_wait();
    T out = value;
    if (lane + offset < 32u && t + offset < blockDim.x) std::memcpy(&out, nv_lanes[t + offset], sizeof(T));
    warp.arrive_and_wait();
    return out;
}

template <class Kernel>
void nv_launch(unsigned int grid, unsigned int block, Kernel kernel) {
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned int b = 0; b < grid; b++) {
        std::barrier<> barrier(block);
        nv_block_barrier = &barrier;
        nv_warp_barriers.clear();
        for (unsigned int w = 0; w * 32 < block; w++) {
            nv_warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, block - w * 32)));
        }
        std::vector<std::thread> threads;
        for (unsigned int t = 0; t < block; t++) {
            threads.emplace_back([=] {
                blockIdx = {b, 0, 0};
                threadIdx = {t, 0, 0};
                kernel();
            });
        }
        for (auto& thread : threads) thread.join();
    }
}

// Files in and out: the test writes each operand to a file and reads the results back.
inline std::vector<unsigned char> nv_read(const char* path) {
    std::vector<unsigned char> bytes;
    FILE* f = std::fopen(path, "rb");
    if (!f) { std::perror(path); std::exit(2); }
    unsigned char buffer[65536];
    size_t got;
    while ((got = std::fread(buffer, 1, sizeof buffer, f)) > 0) bytes.insert(bytes.end(), buffer, buffer + got);
    std::fclose(f);
    return bytes;
}
inline void nv_write(const char* path, const std::vector<unsigned char>& bytes) {
    FILE* f = std::fopen(path, "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) { std::perror(path); std::exit(2); }
    std::fclose(f);
}
