// phase5_batched/trainer_eval.cuh — the Trainer's evaluation on the test set, defined out of the
// class: each chunk of kEvalRows images through the own fused kernels (on every path; not timed),
// the per-tile losses and hits read back and summed. Included by trainer.cuh after the class.
#pragma once

namespace nb {
namespace {

template <class T>
void Trainer<T>::evaluate(double* loss, double* acc) {
  const int n = static_cast<int>(ds_.test_images.count);
  for (int c0 = 0; c0 < n; c0 += eval_rows_) {
    const int rows = std::min(eval_rows_, n - c0);
    for (int l = 0; l < nlayers_; ++l) enqueue_eval_layer(l, c0, rows);
  }
  std::vector<int> ok(eval_tiles_);
  std::vector<float> ls(eval_tiles_);
  CUDA_CHECK(cudaMemcpyAsync(ok.data(), eval_correct_.get(), ok.size() * sizeof(int), cudaMemcpyDeviceToHost, st_));
  CUDA_CHECK(cudaMemcpyAsync(ls.data(), eval_loss_.get(), ls.size() * sizeof(float), cudaMemcpyDeviceToHost, st_));
  CUDA_CHECK(cudaStreamSynchronize(st_));
  double s = 0;
  int64_t c = 0;
  for (int i = 0; i < eval_tiles_; ++i) s += ls[i], c += ok[i];
  *loss = s / n;
  *acc = 100.0 * static_cast<double>(c) / n;
}

// ----- evaluation (own fused kernels in both modes; not timed)
template <class T>
void Trainer<T>::enqueue_eval_layer(int l, int c0, int rows) {
  const auto& w = o_.layers;
  const StepRef sr{base_.get(), 0};
  GatherView<T> g;
  g.data = test_x_.get(), g.ld = w[0], g.rows.row_offset = c0;
  EvalEpi ee;
  ee.bias = params_.get() + boff_[nlayers_ - 1], ee.labels = test_y_.get(), ee.row_offset = c0;
  ee.tile_correct = eval_correct_.get(), ee.tile_loss = eval_loss_.get();
  if (nlayers_ == 1) {
    EvalFirstLast p;
    p.M = rows, p.N = w[1], p.K = w[0], p.a = g, p.b = make_view<T, false>(weights(0), p.K), p.epi = ee;
    plan_splitk_into_slot(p, 0);
    launch_gemm<p5_eval, T>(p, st_);
  } else if (l == 0) {
    FwdFirst p;
    p.M = rows, p.N = w[1], p.K = w[0], p.a = g, p.b = make_view<T, false>(weights(0), p.K);
    p.epi = hidden_epi(0, Heval_[0].get(), sr, false);
    plan_splitk_into_slot(p, 0);
    launch_gemm<p5_eval, T>(p, st_);
  } else if (l + 1 < nlayers_) {
    FwdHidden p;
    p.M = rows, p.N = w[l + 1], p.K = w[l];
    p.a = make_view<T, true>(Heval_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
    p.epi = hidden_epi(l, Heval_[l].get(), sr, false);
    plan_splitk_into_slot(p, 0);
    launch_gemm<p5_eval, T>(p, st_);
  } else {
    EvalLast p;
    p.M = rows, p.N = w[l + 1], p.K = w[l];
    p.a = make_view<T, true>(Heval_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K), p.epi = ee;
    plan_splitk_into_slot(p, 0);
    launch_gemm<p5_eval, T>(p, st_);
  }
}

}  // namespace
}  // namespace nb
