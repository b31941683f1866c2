// common/check.cuh — check every CUDA, cuRAND, CUPTI and cuBLAS(Lt) call.
//
//   CUDA_CHECK(cudaMalloc(&p, bytes));
//   my_kernel<<<grid, block, 0, stream>>>(...);  CHECK_LAUNCH();
//
// A failure throws nb::Error(kExitCuda, "<call text> failed at <file>:<line>: <library message>"),
// which guarded_main prints as one line. CHECK_LAUNCH() reads cudaGetLastError() (launch
// configuration errors); with -DNB_DEBUG_SYNC (make DEBUG=1) it also synchronizes the device so
// that a fault inside the kernel is reported at the launch that caused it.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "errors.h"

namespace nb {

[[noreturn]] inline void throw_call_failure(const char* lib, const char* call, const char* file, int line,
                                            const std::string& msg) {
  throw Error(kExitCuda, std::string(lib) + " call " + call + " failed at " + file + ":" + std::to_string(line) +
                             ": " + msg);
}

inline void cuda_check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess)
    throw_call_failure("CUDA", call, file, line, std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")");
}

inline void launch_check(const char* file, int line) {
  cuda_check(cudaGetLastError(), "<kernel launch>", file, line);
#ifdef NB_DEBUG_SYNC
  cuda_check(cudaDeviceSynchronize(), "<kernel launch> (debug sync)", file, line);
#endif
}

}  // namespace nb

#define CUDA_CHECK(call) ::nb::cuda_check((call), #call, __FILE__, __LINE__)
#define CHECK_LAUNCH() ::nb::launch_check(__FILE__, __LINE__)

// cuRAND.
#include <curand.h>
namespace nb {
inline const char* curand_status_name(curandStatus_t s) {
  switch (s) {
    case CURAND_STATUS_SUCCESS: return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_VERSION_MISMATCH: return "CURAND_STATUS_VERSION_MISMATCH";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE: return "CURAND_STATUS_LENGTH_NOT_MULTIPLE";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED: return "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "CURAND_STATUS_PREEXISTING_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH";
    case CURAND_STATUS_INTERNAL_ERROR: return "CURAND_STATUS_INTERNAL_ERROR";
    default: return "unknown curandStatus_t";
  }
}
inline void curand_check(curandStatus_t s, const char* call, const char* file, int line) {
  if (s != CURAND_STATUS_SUCCESS) throw_call_failure("cuRAND", call, file, line, curand_status_name(s));
}
}  // namespace nb
#define CURAND_CHECK(call) ::nb::curand_check((call), #call, __FILE__, __LINE__)

// CUPTI.
#include <cupti.h>
namespace nb {
inline void cupti_check(CUptiResult r, const char* call, const char* file, int line) {
  if (r != CUPTI_SUCCESS) {
    const char* s = nullptr;
    cuptiGetResultString(r, &s);
    throw_call_failure("CUPTI", call, file, line, s ? s : "unknown CUptiResult");
  }
}
}  // namespace nb
#define CUPTI_CHECK(call) ::nb::cupti_check((call), #call, __FILE__, __LINE__)

// cuBLAS / cuBLASLt.
#include <cublasLt.h>
#include <cublas_v2.h>
namespace nb {
inline void cublas_check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_call_failure("cuBLAS", call, file, line, cublasGetStatusString(s));
}
}  // namespace nb
#define CUBLAS_CHECK(call) ::nb::cublas_check((call), #call, __FILE__, __LINE__)
