// common/device_info.cu — the two measured ceilings of the GPU a run is on (see device_info.h);
// which GPU it is (query_device/require_device) is host code, in device_query.cpp.
//
// measure_peaks(): the two ceilings every efficiency figure in the report is a percentage of,
// measured on this very device rather than taken from a datasheet:
//   copy_gbps   — one device-to-device cudaMemcpy of 1 GiB, bytes read + bytes written over
//                 the median time of 15 repeats (after 3 warm-ups), CUDA events.
//   fp16_tflops — cublasGemmEx C = A·B, 8192³, fp16 inputs, fp32 accumulation (fp16 output, as
//                 torch.matmul on half tensors), 2·8192³ flops over the median of 20 repeats
//                 (after 3 warm-ups), on random normal inputs from cuRAND (never zeros).
// measure_peaks_detailed() also returns the samples and checks 64 entries of the product
// against a float64 host dot product of the same fp16 inputs.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <curand.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "check.cuh"
#include "device_info.h"
#include "linreg_data.cuh"
#include "timing.cuh"

namespace nb {

namespace {

__global__ void float_to_half_kernel(const float* __restrict__ in, __half* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = __float2half(in[i]);
}

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) { CUDA_CHECK(cudaMalloc(&p, n * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct CurandGen {
  curandGenerator_t g = nullptr;
  explicit CurandGen(uint64_t seed) {
    CURAND_CHECK(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(g, seed));
  }
  ~CurandGen() { curandDestroyGenerator(g); }
  CurandGen(const CurandGen&) = delete;
  CurandGen& operator=(const CurandGen&) = delete;
};

struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() { CUBLAS_CHECK(cublasCreate(&h)); }
  ~CublasHandle() { cublasDestroy(h); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
};

}  // namespace

PeakDetail measure_peaks_detailed() {
  PeakDetail out;
  EventTimer timer;

  // ---- copy ceiling: 1 GiB device-to-device, random contents
  {
    const size_t bytes = size_t(1) << 30;
    require_free_memory(2 * bytes, "the copy-bandwidth measurement (2 x 1 GiB)");
    DeviceBuffer<float> src(bytes / sizeof(float)), dst(bytes / sizeof(float));
    CurandGen gen(1234);
    CURAND_CHECK(curandGenerateUniform(gen.g, src.p, bytes / sizeof(float)));
    std::vector<double> ms;
    for (int r = 0; r < out.copy_warmup + out.copy_repeats; ++r) {
      timer.start();
      CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice));
      timer.stop();
      double t = timer.elapsed_ms();
      if (r >= out.copy_warmup) ms.push_back(t);
    }
    out.copy_bytes = bytes;
    out.copy_ms = summarize(ms);
    out.peaks.copy_gbps = 2.0 * static_cast<double>(bytes) / (out.copy_ms.median * 1e-3) / 1e9;
  }

  // ---- tensor-core ceiling: fp16 GEMM with fp32 accumulation
  {
    const int n = out.gemm_n;
    const size_t elems = size_t(n) * n;
    require_free_memory(elems * (3 * sizeof(__half) + sizeof(float)), "the fp16 GEMM measurement (8192^3)");
    DeviceBuffer<__half> a(elems), b(elems), c(elems);
    {
      DeviceBuffer<float> tmp(elems);
      CurandGen gen(5678);
      for (__half* dstp : {a.p, b.p}) {
        CURAND_CHECK(curandGenerateNormal(gen.g, tmp.p, elems, 0.0f, 1.0f));
        float_to_half_kernel<<<1024, 256>>>(tmp.p, dstp, elems);
        CHECK_LAUNCH();
      }
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    CublasHandle blas;
    const float alpha = 1.0f, beta = 0.0f;
    std::vector<double> ms;
    for (int r = 0; r < out.gemm_warmup + out.gemm_repeats; ++r) {
      timer.start();
      CUBLAS_CHECK(cublasGemmEx(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.p, CUDA_R_16F, n, b.p,
                                CUDA_R_16F, n, &beta, c.p, CUDA_R_16F, n, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
      timer.stop();
      double t = timer.elapsed_ms();
      if (r >= out.gemm_warmup) ms.push_back(t);
    }
    out.gemm_ms = summarize(ms);
    out.peaks.fp16_tflops = 2.0 * double(n) * n * n / (out.gemm_ms.median * 1e-3) / 1e12;

    // Correct first: 64 entries of C against float64 dot products of the same fp16 inputs.
    std::vector<__half> ha(elems), hb(elems), hc(elems);
    CUDA_CHECK(cudaMemcpy(ha.data(), a.p, elems * sizeof(__half), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hb.data(), b.p, elems * sizeof(__half), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hc.data(), c.p, elems * sizeof(__half), cudaMemcpyDeviceToHost));
    double err2 = 0, ref2 = 0;
    for (int s = 0; s < 64; ++s) {
      const size_t i = (size_t(s) * 2654435761u + 17) % n, j = (size_t(s) * 40503u + 5) % n;  // column-major
      double ref = 0;
      for (int k = 0; k < n; ++k)
        ref += double(__half2float(ha[size_t(k) * n + i])) * double(__half2float(hb[j * n + k]));
      const double got = __half2float(hc[j * n + i]);
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
    out.gemm_rel_error = std::sqrt(err2 / std::max(ref2, 1e-300));
  }
  return out;
}

Peaks measure_peaks() { return measure_peaks_detailed().peaks; }

}  // namespace nb
