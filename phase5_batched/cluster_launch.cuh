// phase5_batched/cluster_launch.cuh — the launch configuration of a one-dimensional thread-block cluster that
// spans the whole grid (phase 5's cluster rungs): the same object answers whether such a cluster can
// run (cudaOccupancyMaxActiveClusters) and launches it (cudaLaunchKernelExC). Not copyable: the
// configuration points at the object's own attribute.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "check.cuh"

namespace nb {

class ClusterLaunch {
 public:
  ClusterLaunch(int blocks, int threads, size_t smem, cudaStream_t stream = nullptr) {
    attr_[0].id = cudaLaunchAttributeClusterDimension;
    attr_[0].val.clusterDim.x = static_cast<unsigned>(blocks), attr_[0].val.clusterDim.y = 1, attr_[0].val.clusterDim.z = 1;
    cfg_.gridDim = dim3(static_cast<unsigned>(blocks)), cfg_.blockDim = dim3(static_cast<unsigned>(threads));
    cfg_.dynamicSmemBytes = smem, cfg_.stream = stream;
    cfg_.attrs = attr_, cfg_.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;

  // How many such clusters the GPU can hold at once (0: it cannot run one).
  int max_active(const void* kernel) const {
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg_));
    return n;
  }
  // Launches kernel with one argument (the kernel's parameter struct), checked.
  template <class Params>
  void launch(const void* kernel, const Params& p) const {
    void* args[] = {const_cast<Params*>(&p)};
    CUDA_CHECK(cudaLaunchKernelExC(&cfg_, kernel, args));
    CHECK_LAUNCH();
  }

 private:
  cudaLaunchAttribute attr_[1] = {};
  cudaLaunchConfig_t cfg_ = {};
};

}  // namespace nb
