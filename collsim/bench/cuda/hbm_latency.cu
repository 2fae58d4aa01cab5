// hbm_latency.cu: the unloaded latency of one load from GPU 0's device memory, by a pointer chase.
//
// One thread follows a random cyclic permutation of 8-byte slots, one per 128-byte line, through a buffer of SIZE
// bytes (every load depends on the one before, so loads never overlap), for LOADS loads; the time per load is the
// kernel's time (CUDA events, 3 repetitions, the fastest) divided by LOADS. Buffers well beyond the L2 cache give the
// device memory's latency (plus TLB misses once the buffer outgrows the TLBs' reach); small ones the L2's.
// Output: one JSON object per line, {"size_bytes": ..., "stride_bytes": ..., "loads": ..., "ns_per_load": ...,
// "cycles_per_load": ...} with cycles from clock64() on the chasing SM.
// Build and run (collsim bench --probe does it when nvcc is on the PATH):
//   nvcc -O2 -arch=native -o hbm_latency collsim/bench/cuda/hbm_latency.cu && ./hbm_latency
#include <cuda_runtime.h>

#include "check.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

__global__ void chase(const uint64_t* buf, uint64_t start, long loads, uint64_t* sink, long long* cycles) {
    uint64_t i = start;
    long long t0 = clock64();
    for (long n = 0; n < loads; ++n) i = buf[i];
    long long t1 = clock64();
    *sink = i;  // keeps the chain alive
    *cycles = t1 - t0;
}

int main() {
    CHECK(cudaSetDevice(0));
    const long loads = 1 << 20;
    // one slot per 128-byte cache line: the lines touched are the whole buffer, so beyond the L2 (60 MB on an
    // H200) most loads miss it
    const size_t stride = 128;
    const size_t sizes_mib[] = {32, 128, 256, 512, 1024, 2048};
    uint64_t* sink = nullptr;
    long long* dcycles = nullptr;
    CHECK(cudaMalloc(&sink, sizeof(uint64_t)));
    CHECK(cudaMalloc(&dcycles, sizeof(long long)));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    std::mt19937_64 rng(12345);
    for (size_t mib : sizes_mib) {
        size_t size = mib << 20;
        size_t words = size / sizeof(uint64_t);
        size_t step = stride / sizeof(uint64_t);
        size_t slots = words / step;
        std::vector<size_t> order(slots);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<uint64_t> host(words, 0);
        for (size_t k = 0; k < slots; ++k) host[order[k] * step] = order[(k + 1) % slots] * step;  // one cycle
        uint64_t* buf = nullptr;
        CHECK(cudaMalloc(&buf, size));
        CHECK(cudaMemcpy(buf, host.data(), size, cudaMemcpyHostToDevice));
        chase<<<1, 1>>>(buf, order[0] * step, loads / 16, sink, dcycles);  // warm-up
        CHECK(cudaDeviceSynchronize());
        float best = 1e30f;
        long long cycles = 0;
        for (int r = 0; r < 3; ++r) {
            CHECK(cudaEventRecord(a));
            chase<<<1, 1>>>(buf, order[0] * step, loads, sink, dcycles);
            CHECK(cudaEventRecord(b));
            CHECK(cudaEventSynchronize(b));
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, a, b));
            if (ms < best) {
                best = ms;
                CHECK(cudaMemcpy(&cycles, dcycles, sizeof(long long), cudaMemcpyDeviceToHost));
            }
        }
        std::printf("{\"size_bytes\": %zu, \"stride_bytes\": %zu, \"loads\": %ld, \"ns_per_load\": %.2f, "
                    "\"cycles_per_load\": %.1f}\n",
                    size, stride, loads, best * 1e6 / loads, double(cycles) / loads);
        CHECK(cudaFree(buf));
    }
    return 0;
}
