# the tail probe, second form (applied to a tree, argv[1]): thread 0 of each block of a split step-5/6
# product with at least 8 slices (W1's first-layer weight gradient at batch 2,048 ... 8,192) stamps
# %globaltimer: 0 entry, 1 after the PDL wait, 2 after the mainloop (result tile in shared memory),
# 3 after the hand-over's counter (every block), 4 after the partials are added (last block),
# 5 after the first sub-tile's epilogue, 6 after the second (last block); the program prints the
# last such launch's stamps at exit ("probe" lines). Part 2: a ring of every GEMM block's entry and
# exit (kernel id = its problem type, block, grid), the last 8,192 printed at exit ("tl" lines).
import sys
root=sys.argv[1]
p=root+'/common/mlp/gemm/3_split_k.cuh'
s=open(p).read()
old='''namespace nb {
namespace mlp {
'''
s=s.replace(old,old+'''__device__ unsigned long long g_fx[7][1024];
__device__ int g_fx_n;
__device__ __forceinline__ unsigned long long fx_time() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void fx_stamp(bool on, int k) {
  if (on && threadIdx.x == 0 && blockIdx.x < 1024) g_fx[k][blockIdx.x] = fx_time();
}
inline void fx_dump() {
  static unsigned long long h[7][1024];
  int n = 0;
  if (cudaMemcpyFromSymbol(h, g_fx, sizeof(h)) != cudaSuccess) return;
  if (cudaMemcpyFromSymbol(&n, g_fx_n, sizeof(n)) != cudaSuccess) return;
  std::fprintf(stderr, "probe grid %d\\n", n);
  for (int b = 0; b < n && b < 1024; ++b)
    std::fprintf(stderr, "probe %d %llu %llu %llu %llu %llu %llu %llu\\n", b, h[0][b], h[1][b], h[2][b], h[3][b], h[4][b], h[5][b], h[6][b]);
}
''',1)
old='''  __syncthreads();
  if (!s_last) return false;
  __threadfence();
  if constexpr (kVec) {
    constexpr int kN = kSubs * kE4;'''
assert old in s
s=s.replace(old,'''  __syncthreads();
  const bool fx_on = kSubs == 2 && splits >= 8;
  fx_stamp(fx_on, 3);
  if (fx_on && threadIdx.x == 0 && !s_last) g_fx[4][blockIdx.x] = g_fx[5][blockIdx.x] = g_fx[6][blockIdx.x] = 0;
  if (!s_last) return false;
  __threadfence();
  if constexpr (kVec) {
    constexpr int kN = kSubs * kE4;''')
old='''  if (threadIdx.x == 0) counters[tile0] = 0u;  // ready for the next launch
  __syncthreads();
  return true;'''
assert old in s
s=s.replace(old,'''  if (threadIdx.x == 0) counters[tile0] = 0u;  // ready for the next launch
  __syncthreads();
  fx_stamp(fx_on, 4);
  return true;''')
open(p,'w').write(s)
p=root+'/common/mlp/gemm/5_tf32x3.cuh'
s=open(p).read()
old='''  Acc::template prepare<AV, BV>();
'''
assert s.count(old) == 1
s=s.replace(old,'''  const bool fx_on = p.splits >= 8;
  fx_stamp(fx_on, 0);
  if (fx_on && threadIdx.x == 0 && blockIdx.x == 0) g_fx_n = gridDim.x;
  Acc::template prepare<AV, BV>();
''')
old='''  pdl_wait();
  pdl_launch_dependents();
#pragma unroll
  for (int s = 0; s < kXStages - 1; ++s) {'''
assert s.count(old) == 1
s=s.replace(old,'''  pdl_wait();
  fx_stamp(fx_on, 1);
  pdl_launch_dependents();
#pragma unroll
  for (int s = 0; s < kXStages - 1; ++s) {''')
old='''  acc.template store_tile<AV, BV>(cs);
  __syncthreads();
'''
assert old in s
s=s.replace(old,old+'''  fx_stamp(fx_on, 2);
''')
old='''    p.epi(cs + s * (kBM * kLdc), ms, n0, p.M, p.N);
  }
}'''
assert old in s
s=s.replace(old,'''    p.epi(cs + s * (kBM * kLdc), ms, n0, p.M, p.N);
    __syncthreads();
    fx_stamp(fx_on, 5 + s);
  }
}''')
open(p,'w').write(s)
m=root+'/phase5_batched/main.cu'
s=open(m).read()
old='int main(int argc, char** argv) { return nb::guarded_main(argc, argv, nb::run); }'
assert old in s
s=s.replace(old,'int main(int argc, char** argv) { const int rc = nb::guarded_main(argc, argv, nb::run); nb::mlp::fx_dump(); return rc; }')
open(m,'w').write(s)
# part 2: a timeline of every GEMM block (ring of {kernel id, block, grid, entry, exit}), the last
# 8,192 records printed at exit ("tl" lines)
p=root+'/common/mlp/gemm/4_kernels.cuh'
s=open(p).read()
old='''namespace nb {
namespace mlp {
'''
s=s.replace(old,old+'''struct TlRec { unsigned long long id, blk, t0, t1; };
__device__ TlRec g_tl_ring[1 << 20];
__device__ unsigned long long g_tl_n;
template <class K> __device__ int g_tl_kid;
__device__ __forceinline__ unsigned long long tl_time() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
template <class K>
__device__ __forceinline__ void tl_record(unsigned long long t0) {
  if (threadIdx.x == 0) {
    const unsigned long long i = atomicAdd(&g_tl_n, 1ull) & ((1u << 20) - 1);
    g_tl_ring[i] = TlRec{reinterpret_cast<unsigned long long>(&g_tl_kid<K>), (unsigned long long)blockIdx.x | ((unsigned long long)gridDim.x << 32), t0, tl_time()};
  }
}
inline void tl_dump() {
  unsigned long long n = 0;
  if (cudaMemcpyFromSymbol(&n, g_tl_n, sizeof(n)) != cudaSuccess) return;
  static TlRec h[1 << 20];
  if (cudaMemcpyFromSymbol(h, g_tl_ring, sizeof(h)) != cudaSuccess) return;
  const unsigned long long k = n < 8192 ? n : 8192;
  for (unsigned long long j = n - k; j < n; ++j) {
    const TlRec& r = h[j & ((1u << 20) - 1)];
    std::fprintf(stderr, "tl %llx %llu %llu %llu %llu\\n", r.id, r.blk & 0xffffffffull, r.blk >> 32, r.t0, r.t1);
  }
}
''',1)
old='''    gemm_kernel(P p) {
  gemm_tile<T, kAsync ? Loop::Async : Loop::Regs, P, kSplit, kTwoLevel>(p, blockIdx.x, gemm_smem<T>());
}'''
assert old in s
s=s.replace(old,'''    gemm_kernel(P p) {
  const unsigned long long t0 = tl_time();
  gemm_tile<T, kAsync ? Loop::Async : Loop::Regs, P, kSplit, kTwoLevel>(p, blockIdx.x, gemm_smem<T>());
  tl_record<P>(t0);
}''')
open(p,'w').write(s)
for f,name,acc in [('5_tf32x3.cuh','gemm_tf32x3_kernel','AccumX3<kTerms>'),('6_f16_mma.cuh','gemm_f16mma_kernel','AccumF16')]:
    p=root+'/common/mlp/gemm/'+f
    s=open(p).read()
    old='%s(P p) {\n  tc64_tile<P, %s>(p);\n}' % (name, acc)
    assert old in s, f
    s=s.replace(old,'%s(P p) {\n  const unsigned long long t0 = tl_time();\n  tc64_tile<P, %s>(p);\n  tl_record<P>(t0);\n}' % (name, acc))
    open(p,'w').write(s)
m=root+'/phase5_batched/main.cu'
s=open(m).read()
s=s.replace('nb::mlp::fx_dump(); return rc;','nb::mlp::fx_dump(); nb::mlp::tl_dump(); return rc;')
open(m,'w').write(s)
