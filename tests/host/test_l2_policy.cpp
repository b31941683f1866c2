// tests/host/test_l2_policy.cpp — phase 5's `--l2-evict auto` rule (phase5_batched/l2_policy.h): the
// fused passes' masters evict-first in L2 where masters and fp16 copies overflow it and the widest
// layer's copy fits.
#include <doctest/doctest.h>

#include "../../phase5_batched/l2_policy.h"

TEST_CASE("l2-evict auto: overflowing masters and copies, the widest copy fitting") {
  const int64_t l2 = 50LL << 20;  // an H100's 50 MB
  auto w2 = [](int h) { return std::vector<int>{784, h, h, h, 10}; };
  CHECK_FALSE(nb::l2_evict_masters_pays(w2(1024), l2));  // 17.6 MB: all of it fits
  CHECK(nb::l2_evict_masters_pays(w2(2048), l2));        // 60 MB, widest copy 8.4 MB
  CHECK(nb::l2_evict_masters_pays(w2(4096), l2));        // 221 MB, widest copy 33.6 MB
  CHECK_FALSE(nb::l2_evict_masters_pays(w2(8192), l2));  // widest copy 134 MB
  CHECK_FALSE(nb::l2_evict_masters_pays({784, 128, 64, 10}, l2));  // W1
  // The bounds: just past L2, and a copy of exactly L2.
  CHECK(nb::l2_evict_masters_pays({1, 8738134}, l2));      // 52,428,804 B of weights > 52,428,800
  CHECK_FALSE(nb::l2_evict_masters_pays({1, 8738133}, l2));  // 52,428,798 B: fits
  CHECK(nb::l2_evict_masters_pays({2, 13107200}, l2));    // widest copy = L2 exactly (and 150 MB in all)
  CHECK_FALSE(nb::l2_evict_masters_pays({2, 13107201}, l2));
  CHECK_FALSE(nb::l2_evict_masters_pays(w2(2048), 0));  // no L2 reported
}
