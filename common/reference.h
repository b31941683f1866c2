// common/reference.h — float64 CPU references that every phase validates against.
//
// Linear regression (phases 1–3). Full-batch gradient descent on MSE needs only the sums
// S = {n, Σx, Σy, Σx², Σxy, Σy²}: loss(w,b) = (w²Σx² + 2wbΣx + nb² − 2wΣxy − 2bΣy + Σy²)/n,
// dL/dw = 2(wΣx² + bΣx − Σxy)/n, dL/db = 2(wΣx + nb − Σy)/n. One O(n) pass, then `epochs` scalar
// updates: exact up to float64 rounding.
//
// Convention shared by every implementation: epoch e computes the loss at the parameters it
// starts with (loss[e]), then updates w and b. So loss[0] is the loss at the initial w, b.
//
// MLP (phases 4–5). Layer l maps width layers[l] to layers[l+1]: z = a W^T + b with W stored
// row-major [out][in] (PyTorch nn.Linear layout), ReLU on every layer but the last, softmax
// cross-entropy averaged over the batch. Inverted dropout after each hidden ReLU when masks are
// given (mask value 0 or 1/(1-p)).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace nb {

// ---------- linear regression ----------
struct LinregSums {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
};
LinregSums linreg_sums(const float* x, const float* y, size_t n);
double linreg_loss(const LinregSums& s, double w, double b);

struct LinregTrace {
  double w = 0, b = 0;       // after all epochs
  std::vector<double> loss;  // loss[e] at the start of epoch e
};
LinregTrace linreg_reference(const LinregSums& s, double w0, double b0, double lr, int epochs);

// ---------- MLP ----------
struct MlpParams {
  std::vector<int> layers;                   // e.g. {784, 128, 64, 10}
  std::vector<std::vector<double>> W, b;     // W[l]: layers[l+1] x layers[l] row-major; b[l]: layers[l+1]
};
MlpParams mlp_zeros(const std::vector<int>& layers);

struct MlpForward {
  std::vector<std::vector<double>> act;  // act[0] = input; act[l+1] = output of layer l (post ReLU/dropout; last = logits)
  std::vector<double> probs;             // softmax of logits, batch x classes
  double loss = 0;                       // mean cross-entropy
};
// x: batch x layers[0]; labels: batch values in [0, classes). masks (optional): masks[l] for hidden
// layer l (batch x layers[l+1]) holding 0 or 1/(1-p); empty = no dropout.
MlpForward mlp_forward(const MlpParams& p, const double* x, const int* labels, int batch,
                       const std::vector<std::vector<double>>* masks = nullptr);
// Gradients of the mean loss w.r.t. every W and b (same shapes as p).
MlpParams mlp_backward(const MlpParams& p, const MlpForward& f, const int* labels, int batch,
                       const std::vector<std::vector<double>>* masks = nullptr);

void mlp_sgd_step(MlpParams& p, const MlpParams& grad, double lr);

struct AdamState {
  MlpParams m, v;
  int64_t t = 0;
};
AdamState adam_init(const std::vector<int>& layers);
// PyTorch's Adam (no weight decay, no amsgrad): m = β1 m + (1-β1) g; v = β2 v + (1-β2) g²;
// p -= lr * (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps).
void mlp_adam_step(MlpParams& p, const MlpParams& grad, AdamState& s, double lr, double beta1 = 0.9,
                   double beta2 = 0.999, double eps = 1e-8);

// Relative norm error ||a-b|| / ||b|| (0 when both are zero; +inf if b is zero and a is not;
// NaN anywhere gives NaN, which never passes a "<= tol" test).
double rel_error(const std::vector<double>& a, const std::vector<double>& b);
double rel_error(const float* a, const double* b, size_t n);

}  // namespace nb
