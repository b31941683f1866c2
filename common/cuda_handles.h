// common/cuda_handles.h — RAII for what the phases allocate and create, so no chapter repeats it:
// device buffers (counted, for the records' peak_device_memory_bytes), pinned host buffers,
// streams, events and graphs; each is released with its owner, on every exit path.
//
//   nb::DevBuf<float> x(n);        x.get(), x.size(), x.bytes(); x.alloc(n) (re)allocates; moves, never copies
//   nb::HostPinned<float> h(n);    h.get(): page-locked host memory (copies overlap compute)
//   nb::Streams st(4);             st.s[k]: non-blocking streams
//   nb::Event ev(true);            ev.e: with timing (false: cudaEventDisableTiming)
//   nb::Graph g;                   g.g, g.exec: destroyed with g
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "check.cuh"
#include "errors.h"

namespace nb {

// Every device allocation of the phases goes through DevBuf, so the record's
// peak_device_memory_bytes is the sum of what the program itself asked for (cuBLASLt workspace
// included; the CUDA context and module images are not counted).
struct DeviceMemoryCounter {
  size_t now = 0, peak = 0;
  static DeviceMemoryCounter& get() {
    static DeviceMemoryCounter c;
    return c;
  }
};

template <class T>
class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t n) { alloc(n); }
  ~DevBuf() { release(); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DevBuf& operator=(DevBuf&& o) noexcept {
    if (this != &o) {
      release();
      p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  void alloc(size_t n) {
    release();
    if (n == 0) return;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (n * sizeof(T) > free_b)
      throw Error(kExitOutOfMemory, "needs " + std::to_string(n * sizeof(T)) + " more bytes of device memory, " +
                                        std::to_string(free_b) + " free");
    CUDA_CHECK(cudaMalloc(&p_, n * sizeof(T)));
    n_ = n;
    auto& c = DeviceMemoryCounter::get();
    c.now += bytes();
    if (c.now > c.peak) c.peak = c.now;
  }
  void release() {
    if (p_) {
      cudaFree(p_);
      DeviceMemoryCounter::get().now -= bytes();
    }
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void upload(const T* h, size_t n, size_t offset = 0) {
    CUDA_CHECK(cudaMemcpy(p_ + offset, h, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    if (n_) CUDA_CHECK(cudaMemcpy(h.data(), p_, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <class T>
class HostPinned {
 public:
  explicit HostPinned(size_t count) { CUDA_CHECK(cudaMallocHost(&p_, std::max<size_t>(count, 1) * sizeof(T))); }
  ~HostPinned() { cudaFreeHost(p_); }
  HostPinned(const HostPinned&) = delete;
  HostPinned& operator=(const HostPinned&) = delete;
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

struct Streams {
  std::vector<cudaStream_t> s;
  explicit Streams(int k) : s(static_cast<size_t>(k), nullptr) {
    for (auto& x : s) CUDA_CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  }
  ~Streams() {
    for (auto x : s)
      if (x) cudaStreamDestroy(x);
  }
  Streams(const Streams&) = delete;
  Streams& operator=(const Streams&) = delete;
};

struct Event {
  cudaEvent_t e = nullptr;
  explicit Event(bool timing = false) {
    CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

struct Graph {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph() = default;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (g) cudaGraphDestroy(g);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
};

}  // namespace nb
