// cuda_latency.cu: the fixed costs a C++ caller pays on GPU 0, without Python or PyTorch in the way.
//
// What collsim's GPU presets call kernel_launch_latency and memcpy_latency are costs that NCCL and PyTorch's
// ProcessGroupGloo pay from C++ (a kernel launch, a cudaMemcpyAsync then a wait); `collsim bench --probe` measures
// them through PyTorch from Python, which adds its dispatch. This program measures them directly, host clock
// (std::chrono::steady_clock), median and 10th/90th percentiles over ITER repetitions after warm-up:
//   launch_sync      one 1-thread kernel launched on a stream, then cudaStreamSynchronize
//   launch_enqueue   host time of one cudaLaunchKernel of 1000 launched back to back
//   launch_b2b       total time per kernel of those 1000 (enqueue and execution, then one synchronise)
//   memcpy_d2h_pinned / memcpy_h2d_pinned      8 B cudaMemcpyAsync to/from cudaMallocHost memory, then synchronise
//   memcpy_d2h_pageable / memcpy_h2d_pageable  the same to/from malloc memory
//   event_wait_sync  cudaEventRecord on one stream, cudaStreamWaitEvent on another, cudaStreamSynchronize of it
//   sync_idle        cudaStreamSynchronize of an idle stream
// Output: one JSON object per line, {"what": ..., "median_us": ..., "p10_us": ..., "p90_us": ..., "iterations": ...}.
// Build and run (collsim bench --probe does it when nvcc is on the PATH):
//   nvcc -O2 -arch=native -o cuda_latency collsim/bench/cuda/cuda_latency.cu && ./cuda_latency
#include <cuda_runtime.h>

#include "check.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

static const int ITER = 2000;
static const int WARMUP = 200;
static const int BLOCK = 1000;

__global__ void add_one(float* x) { x[0] += 1.0f; }

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void report(const char* what, std::vector<double> t) {
    std::sort(t.begin(), t.end());
    size_t n = t.size();
    std::printf("{\"what\": \"%s\", \"median_us\": %.3f, \"p10_us\": %.3f, \"p90_us\": %.3f, \"iterations\": %zu}\n",
                what, t[n / 2], t[n / 10], t[(9 * n) / 10], n);
}

// Time `body` (which must leave the GPU idle) ITER times after WARMUP untimed runs.
static void time_each(const char* what, const std::function<void()>& body) {
    for (int i = 0; i < WARMUP; ++i) body();
    std::vector<double> t;
    t.reserve(ITER);
    for (int i = 0; i < ITER; ++i) {
        double t0 = now_us();
        body();
        t.push_back(now_us() - t0);
    }
    report(what, t);
}

int main() {
    CHECK(cudaSetDevice(0));
    cudaStream_t s, s2;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    float* dev = nullptr;
    char* pinned = nullptr;
    CHECK(cudaMalloc(&dev, 4096));
    CHECK(cudaMallocHost(&pinned, 4096));
    char* pageable = static_cast<char*>(std::malloc(4096));

    time_each("launch_sync", [&] {
        add_one<<<1, 1, 0, s>>>(dev);
        CHECK(cudaStreamSynchronize(s));
    });
    std::vector<double> enqueue, b2b;
    for (int r = 0; r < 20; ++r) {
        CHECK(cudaStreamSynchronize(s));
        double t0 = now_us();
        for (int i = 0; i < BLOCK; ++i) add_one<<<1, 1, 0, s>>>(dev);
        double t1 = now_us();
        CHECK(cudaStreamSynchronize(s));
        double t2 = now_us();
        if (r >= 2) {  // two untimed rounds
            enqueue.push_back((t1 - t0) / BLOCK);
            b2b.push_back((t2 - t0) / BLOCK);
        }
    }
    report("launch_enqueue", enqueue);
    report("launch_b2b", b2b);
    struct Copy {
        const char* what;
        void* dst;
        const void* src;
        cudaMemcpyKind kind;
    };
    const Copy copies[] = {{"memcpy_d2h_pinned", pinned, dev, cudaMemcpyDeviceToHost},
                           {"memcpy_h2d_pinned", dev, pinned, cudaMemcpyHostToDevice},
                           {"memcpy_d2h_pageable", pageable, dev, cudaMemcpyDeviceToHost},
                           {"memcpy_h2d_pageable", dev, pageable, cudaMemcpyHostToDevice}};
    for (const Copy& c : copies) {
        time_each(c.what, [&] {
            CHECK(cudaMemcpyAsync(c.dst, c.src, 8, c.kind, s));
            CHECK(cudaStreamSynchronize(s));
        });
    }
    time_each("event_wait_sync", [&] {
        CHECK(cudaEventRecord(ev, s));
        CHECK(cudaStreamWaitEvent(s2, ev, 0));
        CHECK(cudaStreamSynchronize(s2));
    });
    time_each("sync_idle", [&] { CHECK(cudaStreamSynchronize(s)); });
    std::free(pageable);
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(dev));
    return 0;
}
