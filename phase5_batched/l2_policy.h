// phase5_batched/l2_policy.h — `--l2-evict auto`: whether the fused backward passes stream their fp32
// master weights through L2 evict-first (5b_fused_backward.cuh's card, "The masters evict-first in
// L2"). The hint pays where a step's masters and fp16 copies together overflow L2, so that LRU
// would evict copies the next forwards read, and where the widest layer's copy alone fits, so that
// keeping it is possible. Measured on W2 (H100, 50 MB of L2; nvidia-h100-80gb-hbm3/logs/
// l2evict_3ce0cb0/): on at h = 2,048 and 4,096 (60 and 221 MB of weights, widest copy 8.4 and 34 MB)
// 88.38 -> 84.41 and 218.88 -> 213.75 us a step; at 1,024 (18 MB, all of it fits) no change; at
// 8,192 (a copy is 134 MB) 681.26 -> 687.56.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace nb {

// layers: the model's widths (inputs first); l2_bytes: the GPU's L2 (cudaDevAttrL2CacheSize).
inline bool l2_evict_masters_pays(const std::vector<int>& layers, int64_t l2_bytes) {
  int64_t all = 0, widest = 0;  // masters (4 B a weight) and copies (2 B); the widest copy
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    const int64_t w = static_cast<int64_t>(layers[l]) * layers[l + 1];
    all += 6 * w;
    widest = std::max(widest, 2 * w);
  }
  return l2_bytes > 0 && all > l2_bytes && widest <= l2_bytes;
}

}  // namespace nb
