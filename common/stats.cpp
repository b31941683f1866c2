// common/stats.cpp — see stats.h.
#include "stats.h"

#include <algorithm>
#include <cmath>

namespace nb {

namespace {
// Sort key: finite values first in ascending order, then ±inf (ascending), then NaN, so that a
// non-finite sample ends up as the max (visible) instead of being silently reordered.
int rank(double v) { return std::isnan(v) ? 2 : (std::isinf(v) ? 1 : 0); }
bool sample_less(double a, double b) {
  int ra = rank(a), rb = rank(b);
  if (ra != rb) return ra < rb;
  return ra == 2 ? false : a < b;
}
}  // namespace

Stats summarize(const std::vector<double>& samples) {
  Stats s;
  s.samples = samples;
  s.count = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end(), sample_less);
  s.min = sorted.front();
  s.max = sorted.back();
  size_t n = sorted.size();
  s.median = (n % 2 == 1) ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  double sum = 0;
  for (double v : samples) sum += v;
  s.mean = sum / static_cast<double>(n);
  return s;
}

}  // namespace nb
