// phase5_batched/lt.h — the three MLP products through cuBLASLt (the `--gemm cublas` path and the
// GEMM comparison), written for row-major operands.
//
// cuBLASLt is column-major; a row-major R[r][c] with leading dimension ld is the column-major
// R^T. A row-major product C[M,N] = A·B is therefore computed as the column-major C^T = B^T·A^T:
//   forward   Z[B,out]  = X[B,in]·W^T   ->  Z^T[out,B]  = op_T(W stored [in,out]) · X^T[in,B]
//   dgrad     dH[B,in]  = dZ[B,out]·W   ->  dH^T[in,B]  = W^T[in,out] · dZ^T[out,B]
//   wgrad     dW[out,in]= dZ^T·X        ->  dW^T[in,out]= X^T[in,B] · op_T(dZ stored [out,B])
// Operands are fp32 (compute 32F, no TF32) or fp16 (compute 32F, fp32 output); outputs are fp32.
#pragma once
#include <cublasLt.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "check.cuh"
#include "mlp/mlp_common.h"

#ifndef CUBLAS_CHECK
#error "check.cuh was included before cuBLAS: #define NB_WANT_CUBLAS before the first include"
#endif

namespace nb {
namespace mlp {

class LtHandle {
 public:
  explicit LtHandle(size_t workspace_bytes = 32u << 20) : ws_(workspace_bytes) { CUBLAS_CHECK(cublasLtCreate(&h_)); }
  ~LtHandle() { cublasLtDestroy(h_); }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  cublasLtHandle_t get() const { return h_; }
  void* workspace() const { return ws_.get(); }
  size_t workspace_bytes() const { return ws_.bytes(); }

 private:
  cublasLtHandle_t h_{};
  DevBuf<uint8_t> ws_;
};

// One planned column-major product D[m,n] = op(A)[m,k] · op(B)[k,n] (D fp32).
class LtGemm {
 public:
  LtGemm() = default;
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm() { destroy(); }

  // tf32: fp32 operands multiplied as TF32 (CUBLAS_COMPUTE_32F_FAST_TF32): the GEMM benchmark's
  // labelled "TF32" row, never the fp32 yardstick.
  template <class T>
  void plan(const LtHandle& h, bool ta, bool tb, int m, int n, int k, int lda, int ldb, int ldd, bool tf32 = false) {
    destroy();
    h_ = &h;
    const cudaDataType_t ab = std::is_same<T, __half>::value ? CUDA_R_16F : CUDA_R_32F;
    const cublasComputeType_t ct = (tf32 && !std::is_same<T, __half>::value) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, ct, CUDA_R_32F));
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    // Stored shapes (before op): A is m x k (or k x m when transposed), B is k x n (or n x k).
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, ab, ta ? k : m, ta ? m : k, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, ab, tb ? n : k, tb ? k : n, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_, CUDA_R_32F, m, n, ldd));
    cublasLtMatmulPreference_t pref{};
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t wsb = h.workspace_bytes();
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h.get(), op_, a_, b_, d_, d_, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    CUBLAS_CHECK(st);
    if (found < 1)
      throw Error(kExitCuda, "cuBLASLt has no algorithm for a " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                 std::to_string(k) + " product");
    algo_ = res.algo;
    planned_ = true;
  }

  void run(const void* A, const void* B, float* D, cudaStream_t st) const {
    const float one = 1.f, zero = 0.f;
    CUBLAS_CHECK(cublasLtMatmul(h_->get(), op_, &one, A, a_, B, b_, &zero, D, d_, D, d_, &algo_, h_->workspace(),
                                h_->workspace_bytes(), st));
  }
  bool planned() const { return planned_; }

 private:
  void destroy() {
    if (a_) cublasLtMatrixLayoutDestroy(a_);
    if (b_) cublasLtMatrixLayoutDestroy(b_);
    if (d_) cublasLtMatrixLayoutDestroy(d_);
    if (op_) cublasLtMatmulDescDestroy(op_);
    a_ = b_ = d_ = nullptr;
    op_ = nullptr;
    planned_ = false;
  }
  const LtHandle* h_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  bool planned_ = false;
};

// The three row-major MLP products of a layer (in -> out) at batch B.
struct LtLayer {
  LtGemm fwd, dgrad, wgrad;
  template <class T>
  void plan(const LtHandle& h, int B, int in, int out, bool with_dgrad, bool tf32 = false) {
    fwd.plan<T>(h, true, false, out, B, in, in, in, out, tf32);        // Z^T = W(T) · X^T
    if (with_dgrad) dgrad.plan<T>(h, false, false, in, B, out, in, out, in, tf32);  // dH^T = W^T · dZ^T
    wgrad.plan<T>(h, false, true, in, out, B, in, out, in, tf32);      // dW^T = X^T · dZ(T)
  }
  // Z[B,out] = X[B,in] · W^T
  void forward(const void* X, const void* W, float* Z, cudaStream_t st) const { fwd.run(W, X, Z, st); }
  // dH[B,in] = dZ[B,out] · W
  void backward_data(const void* dZ, const void* W, float* dH, cudaStream_t st) const { dgrad.run(W, dZ, dH, st); }
  // dW[out,in] = dZ^T · X
  void backward_weight(const void* dZ, const void* X, float* dW, cudaStream_t st) const { wgrad.run(X, dZ, dW, st); }
};

}  // namespace mlp
}  // namespace nb
