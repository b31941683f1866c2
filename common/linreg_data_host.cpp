// common/linreg_data_host.cpp — the host half of linreg_data.h: hand the regression points to the
// PyTorch twin as one float32 .npy of shape (n, 2) (column 0 = x, column 1 = y, storage order).
// (Named _host so its object does not collide with linreg_data.cu's build/common/linreg_data.o.)
#include <vector>

#include "errors.h"
#include "linreg_data.h"
#include "npy.h"

namespace nb {

void save_linreg_npy(const std::string& path, const float* x, const float* y, size_t n) {
  if (n == 0) throw Error(kExitInternal, path + ": refusing to write an empty regression data set");
  std::vector<float> xy(2 * n);
  for (size_t i = 0; i < n; ++i) {
    xy[2 * i] = x[i];
    xy[2 * i + 1] = y[i];
  }
  save_npy(path, xy.data(), {n, 2});
}

}  // namespace nb
