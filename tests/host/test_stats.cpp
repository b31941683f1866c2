// tests/host/test_stats.cpp — nb::summarize (common/stats.h) and the host timer.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "stats.h"

TEST_CASE("stats: odd count — median is the middle value, samples keep their order") {
  nb::Stats s = nb::summarize({5.0, 1.0, 4.0, 2.0, 3.0});
  CHECK(s.count == 5);
  CHECK(s.min == 1.0);
  CHECK(s.max == 5.0);
  CHECK(s.median == 3.0);
  CHECK(s.mean == doctest::Approx(3.0));
  CHECK(s.samples == std::vector<double>{5.0, 1.0, 4.0, 2.0, 3.0});
}

TEST_CASE("stats: even count — median is the mean of the two middle values") {
  nb::Stats s = nb::summarize({10.0, 2.0, 8.0, 4.0});
  CHECK(s.count == 4);
  CHECK(s.median == 6.0);
  CHECK(s.min == 2.0);
  CHECK(s.max == 10.0);
  CHECK(s.mean == 6.0);
  nb::Stats two = nb::summarize({1.0, 2.0});
  CHECK(two.median == 1.5);
  nb::Stats one = nb::summarize({7.25});
  CHECK(one.count == 1);
  CHECK(one.min == 7.25);
  CHECK(one.median == 7.25);
  CHECK(one.max == 7.25);
}

TEST_CASE("stats: empty input gives count 0 and zeros") {
  nb::Stats s = nb::summarize({});
  CHECK(s.count == 0);
  CHECK(s.min == 0);
  CHECK(s.median == 0);
  CHECK(s.max == 0);
  CHECK(s.mean == 0);
  CHECK(s.samples.empty());
}

TEST_CASE("stats: non-finite samples sort last and stay visible") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  nb::Stats s = nb::summarize({3.0, nan, 1.0, 2.0, inf});
  CHECK(s.count == 5);
  CHECK(s.min == 1.0);
  CHECK(s.median == 3.0);       // sorted: 1 2 3 inf nan
  CHECK(std::isnan(s.max));     // NaN sorts after +inf
  CHECK(std::isnan(s.mean));    // a bad run is not averaged away
  nb::Stats t = nb::summarize({inf, 1.0, 2.0});
  CHECK(t.median == 2.0);
  CHECK(std::isinf(t.max));
  nb::Stats u = nb::summarize({nan, nan, 4.0});
  CHECK(u.min == 4.0);
  CHECK(std::isnan(u.median));
}

TEST_CASE("stats: HostTimer is monotonic and non-negative") {
  nb::HostTimer t;
  double a = t.elapsed_ms();
  volatile double sink = 0;
  for (int i = 0; i < 100000; ++i) sink = sink + i;
  double b = t.elapsed_ms();
  CHECK(a >= 0);
  CHECK(b >= a);
  t.reset();
  CHECK(t.elapsed_ms() <= b + 1000.0);
}
