// common/mlp/mlp_common.h — what phase 4 and phase 5 share on the host side (and the two
// counter-based random functions both sides of the PCIe bus must agree on):
//
//   * MlpOptions: the shared flag vocabulary (--layers --batch --epochs|--steps --lr --optimizer
//     --dropout --precision --dataset --data --workload --save-init --save-order --validate-steps +
//     CommonOptions; a phase's own flags, such as phase 5's, live in that phase) and its checks
//     (layers start at 784 and end at 10; dropout in [0,1); batch <= training set).
//   * the initial weights: PyTorch's default nn.Linear init, uniform in ±1/sqrt(fan_in) for W and
//     b, drawn from a counter-based hash of (--seed, tensor, index) so any program can redo it;
//     --save-init DIR writes them as W<l>.npy [out,in] f32 and b<l>.npy [out] f32.
//   * the batch order: epoch e visits the training images in the order perm_e(0..n-1), where
//     perm_e is a 4-round Feistel permutation of [0, 2^bits) keyed by (seed, e), cycle-walked into
//     [0, n). It is a pure function of (seed, e, position): phase 4 evaluates it on the host,
//     phase 5 on the device, and both give the same order for the same seed. An epoch trains
//     floor(n / batch) full batches (the last partial batch is dropped, as drop_last=True in
//     PyTorch; for batch 32 and 60000 images nothing is dropped). --steps S trains S batches,
//     running through epochs 0, 1, ... in turn. --save-order FILE writes int32 [epochs, n]
//     (whole permutations; the twin takes the first floor(n/batch)*batch of each row) or, with
//     --steps, int32 [steps*batch] (exactly the images of each step, in order).
//   * dropout bits: element i of hidden layer l at global step s keeps its value when the first
//     word of Philox4x32-10(counter = {i, l, s_lo, s_hi}, key = {seed_lo, seed_hi}) is >= p*2^32.
//     On the device this is cuRAND's curand_Philox4x32_10(); the host copy below implements the
//     same published algorithm (Salmon et al., SC'11) so the float64 reference can use the very
//     masks the GPU used. tests/gpu/test_mlp_kernels.cu checks the two agree bit for bit.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.h"
#include "cuda_handles.h"
#include "errors.h"
#include "idx.h"
#include "npy.h"

#if defined(__CUDACC__)
#include <curand_philox4x32_x.h>
#endif

namespace nb {
namespace mlp {

// ------------------------------------------------------------------ counter-based randomness
__host__ __device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__host__ __device__ inline uint32_t mix32(uint32_t x) {  // a good 32-bit finaliser (avalanche)
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Philox4x32-10 on the host: the same function as cuRAND's curand_Philox4x32_10 (10 rounds of
// two 32x32->64 multiplies with the published constants, key bumped by the Weyl constants).
struct U4 {
  uint32_t x, y, z, w;
};
inline U4 philox4x32_10_host(U4 c, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = 0xD2511F53ull * c.x, p1 = 0xCD9E8D57ull * c.z;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = U4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The dropout key: derived from --seed so that dropout and initialisation use unrelated streams.
inline uint64_t dropout_key(uint64_t seed) { return splitmix64(seed ^ 0xD80F0D80F0D80F0Dull); }

// Keep threshold for rate p: element kept iff bits >= threshold (p = 0 keeps everything).
inline uint32_t dropout_threshold(double p) {
  double t = std::ldexp(p, 32);
  if (t <= 0) return 0;
  if (t >= 4294967295.0) return 4294967295u;
  return static_cast<uint32_t>(t);
}

inline uint32_t dropout_bits_host(uint64_t key, uint32_t layer, uint64_t step, uint32_t elem) {
  return philox4x32_10_host(U4{elem, layer, static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)},
                            static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32))
      .x;
}

#if defined(__CUDACC__)
__device__ __forceinline__ uint32_t dropout_bits_dev(uint64_t key, uint32_t layer, uint64_t step, uint32_t elem) {
  return curand_Philox4x32_10(make_uint4(elem, layer, static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)),
                              make_uint2(static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)))
      .x;
}
#endif

// Feistel permutation of [0, n) keyed by (seed, epoch); see the header comment.
struct Perm {
  uint32_t n = 1, half_bits = 1, half_mask = 1;
  uint32_t key[4] = {0, 0, 0, 0};
};

inline Perm make_perm(uint64_t seed, uint64_t epoch, uint32_t n) {
  Perm p;
  p.n = n < 1 ? 1 : n;
  uint32_t bits = 2;
  while (bits < 32 && (uint64_t{1} << bits) < p.n) ++bits;
  if (bits & 1) ++bits;
  p.half_bits = bits / 2;
  p.half_mask = (1u << p.half_bits) - 1u;
  for (int r = 0; r < 4; ++r)
    p.key[r] = static_cast<uint32_t>(splitmix64(seed ^ splitmix64(0x5EED0000ull + epoch * 4 + r)));
  return p;
}

__host__ __device__ inline uint32_t perm_apply(const Perm& p, uint32_t x) {
  do {
    uint32_t l = x >> p.half_bits, r = x & p.half_mask;
    for (int k = 0; k < 4; ++k) {
      uint32_t f = mix32(r ^ p.key[k]) & p.half_mask;
      uint32_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << p.half_bits) | r;
  } while (x >= p.n);  // cycle-walk: a permutation of [0, 2^bits) restricted to [0, n)
  return x;
}

// ------------------------------------------------------------------ options
struct MlpOptions {
  std::vector<int> layers{784, 128, 64, 10};
  int batch = 32;
  int epochs = 5;
  int64_t steps = 0;  // > 0: train this many batches instead of --epochs
  double lr = 1e-3;
  std::string optimizer = "adam";
  double dropout = 0.2;
  std::string precision = "fp32";
  std::string dataset = "mnist";
  std::string data_dir;  // default data/<dataset>
  std::string workload = "auto";
  std::string save_init, save_order;
  int validate_steps = 3;
  CommonOptions common;

  bool fp16() const { return precision == "fp16"; }
  bool adam() const { return optimizer == "adam"; }
  int nlayers() const { return static_cast<int>(layers.size()) - 1; }
};

// Registers the shared MLP flags; the caller registers its own and then the common ones
// (cli.add_common(&o.common)), in the order --help lists them.
inline void add_mlp_flags(Cli& cli, MlpOptions& o) {
  cli.add_int_list("--layers", &o.layers, "layer widths, first 784 (28x28 pixels), last 10 (classes)", 1, 1 << 16);
  cli.add_int("--batch", &o.batch, "batch size (<= training images)", 1, 1 << 20);
  cli.add_int("--epochs", &o.epochs, "epochs (ignored when --steps > 0)", 1, 100000);
  cli.add_int("--steps", &o.steps, "train this many batches instead of whole epochs (0 = use --epochs)", 0,
              int64_t{1} << 40);
  cli.add_double("--lr", &o.lr, "learning rate");
  cli.add_string("--optimizer", &o.optimizer, "optimizer", {"adam", "sgd"});
  cli.add_double("--dropout", &o.dropout, "dropout rate after each hidden ReLU, in [0, 1)", false, 0.0, 1.0);
  cli.add_string("--precision", &o.precision, "matrix math: fp32 (SIMT) or fp16 (tensor cores, fp32 master weights)",
                 {"fp32", "fp16"});
  cli.add_string("--dataset", &o.dataset, "data set", {"mnist", "fashion-mnist"});
  cli.add_string("--data", &o.data_dir, "folder with the four IDX .gz files (default data/<dataset>)");
  cli.add_string("--workload", &o.workload, "record workload: auto (adam + 784,128,64,10 -> mlp_w1, else mlp_w2)",
                 {"auto", "mlp_w1", "mlp_w2", "mlp_batch_sweep"});
  cli.add_string("--save-init", &o.save_init, "write the initial weights as W<l>.npy/b<l>.npy into this folder");
  cli.add_string("--save-order", &o.save_order, "write the batch order (int32 .npy) to this file");
  cli.add_int("--validate-steps", &o.validate_steps, "training steps compared with the float64 reference", 1, 50);
}

// Checks that the parser cannot express; throws Error(kExitUsage, ...).
inline void check_mlp_options(MlpOptions& o) {
  if (o.layers.size() < 2) throw Error(kExitUsage, "--layers: need at least two widths (input and output)");
  if (o.layers.front() != 784)
    throw Error(kExitUsage, "--layers: the first width must be 784 (28x28 pixels), got " +
                                std::to_string(o.layers.front()));
  if (o.layers.back() != 10)
    throw Error(kExitUsage, "--layers: the last width must be 10 (classes), got " + std::to_string(o.layers.back()));
  if (!(o.dropout >= 0.0 && o.dropout < 1.0))
    throw Error(kExitUsage, "--dropout: must be in [0, 1), got " + std::to_string(o.dropout));
  if (o.data_dir.empty()) o.data_dir = "data/" + o.dataset;
  if (o.workload == "auto") {
    bool w1 = o.adam() && o.layers == std::vector<int>{784, 128, 64, 10};
    o.workload = w1 ? "mlp_w1" : "mlp_w2";
  }
}

// Schedule: how many steps, and which epoch/position a step reads.
struct Schedule {
  int64_t n_train = 0;
  int batch = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  int epochs = 0;  // epochs touched (ceil(total_steps / steps_per_epoch))
};

inline Schedule make_schedule(const MlpOptions& o, int64_t n_train) {
  if (o.batch > n_train)
    throw Error(kExitUsage, "--batch: " + std::to_string(o.batch) + " exceeds the " + std::to_string(n_train) +
                                " training images");
  Schedule s;
  s.n_train = n_train;
  s.batch = o.batch;
  s.steps_per_epoch = n_train / o.batch;
  s.total_steps = o.steps > 0 ? o.steps : s.steps_per_epoch * o.epochs;
  s.epochs = static_cast<int>((s.total_steps + s.steps_per_epoch - 1) / s.steps_per_epoch);
  return s;
}

// The image index of row r of global step s (host version; the device has the same arithmetic).
inline uint32_t sample_index(const Schedule& sc, uint64_t seed, int64_t step, int row, Perm* cache,
                             int64_t* cache_epoch) {
  int64_t e = step / sc.steps_per_epoch;
  int64_t pos = (step % sc.steps_per_epoch) * sc.batch + row;
  if (*cache_epoch != e) {
    *cache = make_perm(seed, static_cast<uint64_t>(e), static_cast<uint32_t>(sc.n_train));
    *cache_epoch = e;
  }
  return perm_apply(*cache, static_cast<uint32_t>(pos));
}

inline void save_order(const std::string& path, const MlpOptions& o, const Schedule& sc) {
  std::vector<int32_t> out;
  if (o.steps > 0) {
    out.reserve(static_cast<size_t>(sc.total_steps) * sc.batch);
    Perm p;
    int64_t pe = -1;
    for (int64_t s = 0; s < sc.total_steps; ++s)
      for (int r = 0; r < sc.batch; ++r) out.push_back(static_cast<int32_t>(sample_index(sc, o.common.seed, s, r, &p, &pe)));
    save_npy(path, out.data(), {out.size()});
  } else {
    out.reserve(static_cast<size_t>(sc.epochs) * sc.n_train);
    for (int e = 0; e < sc.epochs; ++e) {
      Perm p = make_perm(o.common.seed, static_cast<uint64_t>(e), static_cast<uint32_t>(sc.n_train));
      for (int64_t i = 0; i < sc.n_train; ++i) out.push_back(static_cast<int32_t>(perm_apply(p, static_cast<uint32_t>(i))));
    }
    save_npy(path, out.data(), {static_cast<size_t>(sc.epochs), static_cast<size_t>(sc.n_train)});
  }
}

// ------------------------------------------------------------------ initial weights
struct HostParams {
  std::vector<int> layers;
  std::vector<std::vector<float>> W, b;  // W[l]: [out][in] row-major; b[l]: [out]
};

inline HostParams init_params(const std::vector<int>& layers, uint64_t seed) {
  HostParams p;
  p.layers = layers;
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    const int in = layers[l], out = layers[l + 1];
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    auto draw = [&](uint64_t tensor, uint64_t i) {
      uint64_t h = splitmix64(seed ^ splitmix64((tensor << 40) ^ i));
      double u = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
      return static_cast<float>((2.0 * u - 1.0) * bound);
    };
    std::vector<float> W(static_cast<size_t>(out) * in), b(out);
    for (size_t i = 0; i < W.size(); ++i) W[i] = draw(2 * l, i);
    for (int i = 0; i < out; ++i) b[i] = draw(2 * l + 1, static_cast<uint64_t>(i));
    p.W.push_back(std::move(W));
    p.b.push_back(std::move(b));
  }
  return p;
}

inline void save_init(const std::string& dir, const HostParams& p) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(kExitOutput, dir + ": cannot create directory: " + ec.message());
  for (size_t l = 0; l < p.W.size(); ++l) {
    const size_t in = p.layers[l], out = p.layers[l + 1];
    save_npy(dir + "/W" + std::to_string(l) + ".npy", p.W[l].data(), {out, in});
    save_npy(dir + "/b" + std::to_string(l) + ".npy", p.b[l].data(), {out});
  }
}

// What both MLP phases do before training: load and check the data, plan the batches, refuse a
// model too large for a visible GPU, draw the initial weights, and write the twin's hand-over
// files when asked. On a machine without a GPU all of it runs (hand-over files included) and
// fails, where it fails, with its own exit code.
struct MlpSetup {
  Dataset ds;
  Schedule sc;
  HostParams init;
};
// A model whose parameters and optimizer state alone exceed the free memory of a visible GPU is
// refused (exit 5) before a single weight is drawn on the host: four hidden layers of 65536 would
// otherwise spend minutes and tens of GB of host memory on weights the GPU could never hold. With
// no visible device nothing is checked here (require_device refuses later, with exit 3).
inline void refuse_model_too_large(const MlpOptions& o) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return;
  }
  double params = 0;
  for (size_t l = 0; l + 1 < o.layers.size(); ++l)
    params += static_cast<double>(o.layers[l + 1]) * o.layers[l] + o.layers[l + 1];
  const double need = params * ((o.adam() ? 12.0 : 4.0) + (o.fp16() ? 2.0 : 0.0));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (need > static_cast<double>(free_b)) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "the model needs at least %.0f bytes of device memory (%.0f parameters%s), %zu free",
                  need, params, o.adam() ? " with Adam state" : "", free_b);
    throw Error(kExitOutOfMemory, buf);
  }
}

inline MlpSetup prepare_mlp_run(const MlpOptions& o) {
  MlpSetup s{load_dataset(o.data_dir, o.dataset), {}, {}};
  s.sc = make_schedule(o, s.ds.train_images.count);
  refuse_model_too_large(o);
  s.init = init_params(o.layers, o.common.seed);
  if (!o.save_init.empty()) save_init(o.save_init, s.init);
  if (!o.save_order.empty()) save_order(o.save_order, o, s.sc);
  return s;
}

inline std::vector<float> to_float(const std::vector<__half>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __half2float(v[i]);
  return o;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Workload-independent kernel efficiency bookkeeping: each launch of a kernel whose name contains
// `tag` adds its flops and compulsory bytes (each input read once, each output written once).
struct KernelCost {
  double flops = 0, bytes = 0;
  int64_t calls = 0;
};

}  // namespace mlp
}  // namespace nb
