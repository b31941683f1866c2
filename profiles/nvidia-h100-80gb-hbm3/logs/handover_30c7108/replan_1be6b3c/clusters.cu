// How many clusters of S blocks this GPU holds at once, for 1 and 2 blocks an SM (shared memory).
#include <cstdio>
#include <cuda_runtime.h>
__global__ void k(int* p) { extern __shared__ int s[]; if (p) p[0] = s[0]; }
int main() {
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  for (int smem : {200 * 1024, 100 * 1024})
    for (int S = 1; S <= 8; ++S) {
      cudaLaunchConfig_t cfg = {}; cudaLaunchAttribute a = {};
      a.id = cudaLaunchAttributeClusterDimension; a.val.clusterDim.x = S; a.val.clusterDim.y = 1; a.val.clusterDim.z = 1;
      cfg.gridDim = dim3(S * 64); cfg.blockDim = dim3(256); cfg.dynamicSmemBytes = smem; cfg.attrs = &a; cfg.numAttrs = 1;
      int n = 0; cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
      printf("smem %3d KB cluster %d: %3d clusters (%3d blocks) %s\n", smem / 1024, S, n, n * S, cudaGetErrorString(e));
    }
}
