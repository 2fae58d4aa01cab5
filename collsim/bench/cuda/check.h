// check.h: CHECK(call) ends the program with the call and CUDA's message when a runtime call fails (the probe then
// records "run failed" and goes on). Shared by cuda_latency.cu and hbm_latency.cu.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t err_ = (call);                                                           \
        if (err_ != cudaSuccess) {                                                           \
            std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(err_));              \
            std::exit(1);                                                                    \
        }                                                                                    \
    } while (0)
