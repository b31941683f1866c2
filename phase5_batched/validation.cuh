// phase5_batched/validation.cuh — --validate: the first steps of a run against the float64
// reference (common/mlp/validate.h: each step re-anchored at the device's parameters; tolerances
// from the shape and the precision) on the same batches, with the same dropout masks (recomputed on
// the host from the same Philox bits); the gradients are the ones the fused update stores for this
// purpose only.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "check.cuh"
#include "mlp/mlp_common.h"
#include "mlp/validate.h"
#include "trainer.cuh"

namespace nb {
namespace {

using namespace nb::mlp;

constexpr float kPixelMax = 255.0f;  // an image byte's largest value: pixels enter as byte / kPixelMax

template <class T>
ValidationResult validate(Trainer<T>& tr, const MlpOptions& o, const Schedule& sc, const Dataset& ds,
                          const HostParams& init) {
  const bool half = std::is_same<T, __half>::value;
  const int nsteps = static_cast<int>(std::min<int64_t>(o.validate_steps, sc.steps_per_epoch));
  const int batch = o.batch, nlayers = o.nlayers(), in_width = o.layers[0];
  const double scale = 1.0 / (1.0 - o.dropout);
  const uint64_t key = dropout_key(o.common.seed);
  const uint32_t thr = dropout_threshold(o.dropout);
  Perm perm;
  int64_t perm_epoch = -1;
  tr.keep_gradients(true);
  tr.reset();
  ValidationResult v = validate_steps(validate_spec(o), flatten(to_reference(init)), nsteps, [&](int k) {
    StepSeen s;
    tr.single_step(k, k + 1 < nsteps);
    CUDA_CHECK(cudaStreamSynchronize(tr.stream()));
    s.loss = tr.losses(k, 1)[0];
    s.x.resize(static_cast<size_t>(batch) * in_width);
    s.labels.resize(batch);
    for (int r = 0; r < batch; ++r) {
      const uint32_t idx = sample_index(sc, o.common.seed, k, r, &perm, &perm_epoch);
      for (int j = 0; j < in_width; ++j) {
        const float f = static_cast<float>(ds.train_images.pixels[static_cast<size_t>(idx) * in_width + j]) / kPixelMax;
        s.x[static_cast<size_t>(r) * in_width + j] = half ? static_cast<double>(__half2float(__float2half_rn(f))) : f;
      }
      s.labels[r] = ds.train_labels.labels[idx];
    }
    for (int l = 0; l + 1 < nlayers && o.dropout > 0; ++l) {
      const int width = o.layers[l + 1];
      std::vector<double> m(static_cast<size_t>(batch) * width);
      for (size_t i = 0; i < m.size(); ++i)
        m[i] = dropout_bits_host(key, static_cast<uint32_t>(l), static_cast<uint64_t>(k), static_cast<uint32_t>(i)) >= thr
                   ? scale
                   : 0.0;
      s.masks.push_back(std::move(m));
    }
    s.grads = tr.grads();
    s.params = tr.params();
    return s;
  });
  // The same steps as one graph replay, as the timed runs take them (captured, kernels launched with
  // PDL, the branched backward's second stream), must give the single steps' parameters bit for bit
  // (the host waits between single steps, so nothing of one overlaps the next): any difference is
  // a missing order between two kernels (such as a kernel under PDL fetching, before its wait,
  // weights the kernel just before it writes: GemmProblem::b_fresh).
  if (tr.own_graph()) {
    const std::vector<double> single = tr.params();
    tr.reset();
    tr.replay_once(nsteps);
    const std::vector<double> replay = tr.params();
    double worst = 0;
    for (size_t i = 0; i < single.size(); ++i)
      if (replay[i] != single[i]) {
        const double r = rel_scalar(replay[i], single[i]);
        if (!(r <= worst)) worst = r;  // a NaN stays (and fails the check)
      }
    v.check("graph_replay_params", worst, 0.0);
  }
  tr.keep_gradients(false);
  tr.reset();
  return v;
}

}  // namespace
}  // namespace nb
