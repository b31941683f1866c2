# The grid probe (applied to a tree, argv[1]): rung 5g's barriers and teams stamped with %globaltimer
# in every block, over 32 steps of the first epoch (steps 1,000 ... 1,031 of a launch that starts at
# step 0). Events a step, per block: 2k the chain's thread 0 after its arrival at grid barrier k (fence
# and atomic done), 2k+1 after its wait (k = 0 .. 4 for three hidden layers); 10 / 11 the update
# team's first thread at the start / end of the last hidden layer's update (with the last layer's
# columns), 12 / 13 the same for the layer below; 14 the chain at the step's start, 15 at its end.
# The program prints the window at exit ("gs" lines: step, event, one time a block in ns from the
# window's first stamp); analyze_grid.py reads them.
import sys
root = sys.argv[1]
p = root + '/phase5_batched/5g_grid.cuh'
s = open(p).read()

def rep(old, new):
    global s
    assert s.count(old) == 1, old[:70]
    s = s.replace(old, new)

rep('''namespace gr {
''', '''namespace gr {
constexpr int kGsSteps = 32, kGsEvents = 16, kGsBlocks = 256, kGsFirst = 1000;
__device__ unsigned long long g_gs[kGsSteps][kGsEvents][kGsBlocks];
__device__ __forceinline__ unsigned long long gs_time() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
''')
rep('''  unsigned bars = 0;    // barriers this block has arrived at in this launch''',
    '''  unsigned bars = 0;    // barriers this block has arrived at in this launch
  int gs_t = -1;        // the probe: the step's slot in the window (-1: not stamped)
  unsigned gs_bar0 = 0; // bars at the step's start
  __device__ __forceinline__ void gs_stamp(int ev) const {
    if (gs_t >= 0 && r < kGsBlocks) g_gs[gs_t][ev][r] = gs_time();
  }''')
rep('''      atomicAdd(bar, 1u);
    }
    ++bars;''', '''      atomicAdd(bar, 1u);
      gs_stamp(2 * static_cast<int>(bars - gs_bar0));
    }
    ++bars;''')
rep('''      } while (seen < target);
      __threadfence();
    }''', '''      } while (seen < target);
      __threadfence();
      gs_stamp(2 * static_cast<int>(bars - 1 - gs_bar0) + 1);
    }''')
# the update team
rep('''        const int par = t & 1;
        for (int l = L - 2; l >= 1; --l) {
          gr_bar_sync(gr_bar_dz(l), kGrThreads);
          if (l == L - 2) blk.update_last();
          blk.update_rows(l, par);
          __threadfence();
          gr_bar_arrive(gr_bar_rows(l), kGrThreads);
        }''', '''        const int par = t & 1;
        blk.gs_t = (p.s0 == 0 && t >= gr::kGsFirst && t < gr::kGsFirst + gr::kGsSteps && threadIdx.x == kGrChainThreads) ? t - gr::kGsFirst : -1;
        for (int l = L - 2; l >= 1; --l) {
          gr_bar_sync(gr_bar_dz(l), kGrThreads);
          const int ev = 10 + 2 * (L - 2 - l);
          if (ev < 14) blk.gs_stamp(ev);
          if (l == L - 2) blk.update_last();
          blk.update_rows(l, par);
          __threadfence();
          if (ev < 14) blk.gs_stamp(ev + 1);
          gr_bar_arrive(gr_bar_rows(l), kGrThreads);
        }''')
# the chain
rep('''      const bool more = t + 1 < p.count;
      blk.load_labels(i);''', '''      const bool more = t + 1 < p.count;
      blk.gs_t = (p.s0 == 0 && t >= gr::kGsFirst && t < gr::kGsFirst + gr::kGsSteps && threadIdx.x == 0) ? t - gr::kGsFirst : -1;
      blk.gs_bar0 = blk.bars;
      blk.gs_stamp(14);
      blk.load_labels(i);''')
rep('''      if (more) blk.store_x();
      blk.chain_sync();
      clock.stamp(6);''', '''      if (more) blk.store_x();
      blk.chain_sync();
      clock.stamp(6);
      blk.gs_stamp(15);''')
s += '''
#include <cstdio>
namespace nb {
namespace mlp {
// The probe's window, printed at exit.
inline void gs_dump_impl() {
  static unsigned long long h[gr::kGsSteps][gr::kGsEvents][gr::kGsBlocks];
  if (cudaMemcpyFromSymbol(h, gr::g_gs, sizeof(h)) != cudaSuccess) return;
  unsigned long long t0 = ~0ull;
  for (auto& a : h) for (auto& b : a) for (unsigned long long v : b) if (v && v < t0) t0 = v;
  for (int t = 0; t < gr::kGsSteps; ++t)
    for (int e = 0; e < gr::kGsEvents; ++e) {
      int n = gr::kGsBlocks;
      while (n > 0 && h[t][e][n - 1] == 0) --n;
      if (n == 0) continue;
      std::fprintf(stderr, "gs %d %d", t, e);
      for (int b = 0; b < n; ++b) std::fprintf(stderr, " %lld", h[t][e][b] ? static_cast<long long>(h[t][e][b] - t0) : -1ll);
      std::fprintf(stderr, "\\n");
    }
}
}  // namespace mlp
}  // namespace nb
'''
open(p, 'w').write(s)

p = root + '/phase5_batched/5g_grid.cu'
s = open(p).read()
s += '''
namespace nb { namespace mlp { void gs_dump() { gs_dump_impl(); } } }
'''
open(p, 'w').write(s)

p = root + '/phase5_batched/main.cu'
s = open(p).read()
old = 'int main(int argc, char** argv) { return nb::guarded_main(argc, argv, nb::run); }'
assert s.count(old) == 1
s = s.replace(old, 'namespace nb { namespace mlp { void gs_dump(); } }\nint main(int argc, char** argv) { const int rc = nb::guarded_main(argc, argv, nb::run); nb::mlp::gs_dump(); return rc; }')
open(p, 'w').write(s)
print("probe_grid: applied to", root)
