#pragma once
// RAII owners of CUDA resources (device memory, pinned host memory, streams, events) and the
// device query. CUDA builds only: include from *_cuda.cpp files and CUDA tests.
// Every call is checked (throws RuntimeError); destructors never throw.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/cuda_check.hpp"
#include "timing/device_query.hpp"

namespace attn {

// cudaMalloc'd bytes, move-only. A zero-byte buffer holds no pointer.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }

  // Synchronous copies of `n` bytes (n <= bytes()) at byte offset `offset`.
  void upload(const void* src, std::size_t n, std::size_t offset = 0);
  void download(void* dst, std::size_t n, std::size_t offset = 0) const;
  // Stream-ordered copies; `host` should be pinned for the copy to be truly asynchronous.
  void upload_async(const void* src, std::size_t n, cudaStream_t stream, std::size_t offset = 0);
  void download_async(void* dst, std::size_t n, cudaStream_t stream, std::size_t offset = 0) const;
  // Every byte set to `value`, stream-ordered.
  void memset_async(int value, cudaStream_t stream);
  void reset();  // frees now

 private:
  void check_range(std::size_t n, std::size_t offset, const char* what) const;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost), move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  void reset();

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// A non-blocking stream (cudaStreamNonBlocking: no implicit sync with the legacy stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }  // NOLINT: used where a cudaStream_t is expected
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

// A timing event (cudaEventDefault).
class Event {
 public:
  Event();
  ~Event();
  Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s);
  // Milliseconds from `start` to this event (both recorded and complete).
  float elapsed_ms_since(const Event& start) const;
  void synchronize() const;

 private:
  cudaEvent_t e_ = nullptr;
};

// True when a CUDA device can be used; otherwise false with the runtime's reason in *why
// ("no CUDA-capable device is detected", "CUDA driver version is insufficient ...").
bool cuda_device_present(std::string* why = nullptr);
// Facts of the current device (throws RuntimeError when there is none).
DeviceInfo query_device_info();

}  // namespace attn
