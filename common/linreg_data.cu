// common/linreg_data.cu — the regression data set on the device (see linreg_data.h / .cuh).
//
//   1. cuRAND's host API, Philox4x32-10 seeded with --seed, fills a temporary buffer with
//      z_0 .. z_{m-1} ~ N(0, 1), m = n rounded up to even (curandGenerateNormal draws pairs).
//   2. One kernel writes storage slot i from original index p = linreg_original_index(i, n):
//      x = float(10.0 * p / n) and y = float(0.7 * x + 0.3 + 0.5 * z_p), in double, with the
//      roundings spelled out (__dmul_rn/__dadd_rn: no fused multiply-add) so the host can
//      recompute every value bit for bit. z_p is indexed by the original index, so the data
//      do not depend on the storage layout.
#define NB_WANT_CURAND
#include <curand.h>

#include <cstdio>
#include <string>

#include "check.cuh"
#include "linreg_data.cuh"

namespace nb {

namespace {

// Device twin of linreg_original_index() (linreg_data.h is host-only); the GPU tests check
// that both give the same layout.
__device__ size_t original_index_dev(size_t i, size_t n) {
  const size_t nt = n - n / 5;  // = linreg_train_count(n): test points are p % 5 == 4, p < n
  return i < nt ? (i / 4) * 5 + i % 4 : (i - nt) * 5 + 4;
}

__global__ void linreg_fill_kernel(float* __restrict__ x, float* __restrict__ y, const float* __restrict__ z,
                                   size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t p = original_index_dev(i, n);
    const float xf = static_cast<float>(__ddiv_rn(__dmul_rn(10.0, static_cast<double>(p)), static_cast<double>(n)));
    const double xd = xf;
    const double yd = __dadd_rn(__dadd_rn(__dmul_rn(kLinregTrueW, xd), kLinregTrueB),
                                __dmul_rn(kLinregNoiseStd, static_cast<double>(z[p])));
    x[i] = xf;
    y[i] = static_cast<float>(yd);
  }
}

}  // namespace

size_t linreg_generate_bytes(size_t n) {
  const size_t m = n + (n & 1);
  return 2 * n * sizeof(float) + m * sizeof(float);
}

void require_free_memory(size_t bytes, const char* what) {
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const size_t margin = size_t(64) << 20;  // allocator granularity, cuRAND/cuBLAS workspaces
  if (bytes > free_b || free_b - bytes < margin) {
    char msg[256];
    std::snprintf(msg, sizeof msg, "needs %.2f GiB of GPU memory for %s, only %.2f GiB free",
                  static_cast<double>(bytes) / double(1u << 30), what ? what : "this run",
                  static_cast<double>(free_b) / double(1u << 30));
    throw Error(kExitOutOfMemory, msg);
  }
}

void generate_linreg(float* d_x, float* d_y, size_t n, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return;
  const size_t m = n + (n & 1);
  float* z = nullptr;
  CUDA_CHECK(cudaMalloc(&z, m * sizeof(float)));
  curandGenerator_t gen = nullptr;
  try {
    CURAND_CHECK(curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(gen, seed));
    CURAND_CHECK(curandSetStream(gen, stream));
    CURAND_CHECK(curandGenerateNormal(gen, z, m, 0.0f, 1.0f));
    const int block = 256;
    const size_t want = (n + block - 1) / block;
    const int grid = static_cast<int>(want < 65536 ? want : 65536);
    linreg_fill_kernel<<<grid, block, 0, stream>>>(d_x, d_y, z, n);
    CHECK_LAUNCH();
    CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    if (gen) curandDestroyGenerator(gen);
    cudaFree(z);
    throw;
  }
  CURAND_CHECK(curandDestroyGenerator(gen));
  CUDA_CHECK(cudaFree(z));
}

}  // namespace nb
