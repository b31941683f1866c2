// common/runner.h — the measurement every phase makes, in one place: warm-up runs, the timed runs
// WITHOUT our CUPTI tracer (it adds ~1.5-2 µs to every launch it watches: the tracer_overhead
// record), then runs again, untimed, WITH the tracer on, for the record's kernel/memcpy/range
// summaries. A phase supplies one training run; the runner says which kind of run it is.
//
//   const nb::TimedRuns tr = nb::timed_then_traced({opt.warmup, opt.repeats, opt.repeats, !opt.no_cupti},
//                                                  [&](nb::RunKind kind) { return one_run(kind); });
//   const nb::Stats st = nb::summarize(tr.samples);   // the timed runs' milliseconds
//   ... tr.trace_runs runs ran traced; the tracer is still on: summarize it, then Tracer::stop() ...
//
// The optional `stop` is asked after every timed run (a run that diverged ends the timing early,
// and no traced run follows: the phases 4-5 trainers); `after_timed` runs once between the timed
// and the traced runs (to keep what the timed runs left: parameters, breakdown counters). Timing
// stays in the phase (events around what it times); the runner only orders the runs and switches
// the tracer.
#pragma once
#include <functional>
#include <vector>

#include "tracer.h"

namespace nb {

enum class RunKind { Warmup, Timed, Traced };

struct RunPlan {
  int warmup = 1;          // untimed runs first
  int repeats = 5;         // timed runs (the median is reported)
  int traced = 5;          // untimed runs with the tracer on, after the timed ones (0: none)
  bool tracer_allowed = true;  // false with --no-cupti (or under nsys/ncu: Tracer::start says so)
};

struct TimedRuns {
  std::vector<double> samples;  // the timed runs' results (ms), in order
  int trace_runs = 0;           // how many runs ran with the tracer on (0: tracer off or not allowed)
};

// one_run(kind) runs once and returns its time in ms (ignored for warm-up and traced runs).
template <class OneRun>
TimedRuns timed_then_traced(const RunPlan& plan, OneRun&& one_run, const std::function<bool()>& stop = {},
                            const std::function<void()>& after_timed = {}) {
  TimedRuns r;
  for (int i = 0; i < plan.warmup; ++i) one_run(RunKind::Warmup);
  bool stopped = false;
  for (int i = 0; i < plan.repeats && !stopped; ++i) {
    r.samples.push_back(one_run(RunKind::Timed));
    stopped = stop && stop();
  }
  if (after_timed) after_timed();
  if (stopped) return r;  // no traced runs after a run that ended the measurement
  Tracer& tracer = Tracer::instance();
  if (plan.traced > 0 && plan.tracer_allowed && tracer.start(true)) {
    tracer.clear();
    for (; r.trace_runs < plan.traced; ++r.trace_runs) one_run(RunKind::Traced);
  }
  return r;
}

}  // namespace nb
