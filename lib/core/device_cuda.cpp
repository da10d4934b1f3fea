#include "core/device.hpp"

#include <utility>

#include "core/host_memory.hpp"

namespace attn {

// ---- DeviceBuffer ----------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    bytes_ = 0;
    ptr_ = nullptr;
    (void)cudaGetLastError();
    std::string free_note;
    std::size_t free_bytes = 0, total_bytes = 0;
    if (err == cudaErrorMemoryAllocation && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
      free_note = "; the device has " + format_bytes(static_cast<double>(free_bytes)) + " free of " +
                  format_bytes(static_cast<double>(total_bytes));
    throw RuntimeError("cudaMalloc of " + std::to_string(bytes) + " bytes (" + format_bytes(static_cast<double>(bytes)) +
                       ") failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")" + free_note);
  }
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  // cudaFree synchronizes the device; its error (e.g. a sticky fault from an earlier kernel)
  // is dropped here because destructors never throw. The caller sees it at its next check.
  if (ptr_) (void)cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

void DeviceBuffer::check_range(std::size_t n, std::size_t offset, const char* what) const {
  if (offset > bytes_ || n > bytes_ - offset)
    throw RuntimeError(std::string("DeviceBuffer::") + what + ": " + std::to_string(n) + " bytes at offset " +
                       std::to_string(offset) + " exceed the buffer's " + std::to_string(bytes_) + " bytes");
}

void DeviceBuffer::upload(const void* src, std::size_t n, std::size_t offset) {
  check_range(n, offset, "upload");
  if (n) ATTN_CUDA_CHECK(cudaMemcpy(static_cast<char*>(ptr_) + offset, src, n, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* dst, std::size_t n, std::size_t offset) const {
  check_range(n, offset, "download");
  if (n) ATTN_CUDA_CHECK(cudaMemcpy(dst, static_cast<const char*>(ptr_) + offset, n, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::upload_async(const void* src, std::size_t n, cudaStream_t stream, std::size_t offset) {
  check_range(n, offset, "upload_async");
  if (n)
    ATTN_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(ptr_) + offset, src, n, cudaMemcpyHostToDevice, stream));
}

void DeviceBuffer::download_async(void* dst, std::size_t n, cudaStream_t stream, std::size_t offset) const {
  check_range(n, offset, "download_async");
  if (n)
    ATTN_CUDA_CHECK(
        cudaMemcpyAsync(dst, static_cast<const char*>(ptr_) + offset, n, cudaMemcpyDeviceToHost, stream));
}

void DeviceBuffer::memset_async(int value, cudaStream_t stream) {
  if (bytes_) ATTN_CUDA_CHECK(cudaMemsetAsync(ptr_, value, bytes_, stream));
}

// ---- PinnedBuffer ----------------------------------------------------------------------------

PinnedBuffer::PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMallocHost(&ptr_, bytes);
  if (err != cudaSuccess) {
    bytes_ = 0;
    ptr_ = nullptr;
    (void)cudaGetLastError();
    throw RuntimeError("cudaMallocHost of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorName(err));
  }
}

PinnedBuffer::~PinnedBuffer() { reset(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void PinnedBuffer::reset() {
  if (ptr_) (void)cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

// ---- Stream / Event --------------------------------------------------------------------------

Stream::Stream() { ATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }

Stream::~Stream() {
  if (s_) (void)cudaStreamDestroy(s_);
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) (void)cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const { ATTN_CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event() { ATTN_CUDA_CHECK(cudaEventCreate(&e_)); }

Event::~Event() {
  if (e_) (void)cudaEventDestroy(e_);
}

void Event::record(cudaStream_t s) { ATTN_CUDA_CHECK(cudaEventRecord(e_, s)); }

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  ATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

void Event::synchronize() const { ATTN_CUDA_CHECK(cudaEventSynchronize(e_)); }

// ---- device query ----------------------------------------------------------------------------

bool cuda_device_present(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  // Said plainly first, with the runtime's own error kept as the detail.
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) {
    (void)cudaGetLastError();
    if (why)
      *why = std::string("no NVIDIA GPU or driver on this machine (") + cudaGetErrorName(err) + ": " +
             cudaGetErrorString(err) + ")";
    return false;
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = std::string("the CUDA runtime cannot use the GPU (") + cudaGetErrorName(err) + ": " +
                    cudaGetErrorString(err) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "no NVIDIA GPU on this machine (the driver reports 0 CUDA devices)";
    return false;
  }
  return true;
}

DeviceInfo query_device_info() {
  int dev = 0;
  ATTN_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  ATTN_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  DeviceInfo info;
  info.ordinal = dev;
  info.name = p.name;
  info.cc_major = p.major;
  info.cc_minor = p.minor;
  info.num_sms = p.multiProcessorCount;
  info.l2_bytes = static_cast<std::size_t>(p.l2CacheSize);
  info.total_memory_bytes = p.totalGlobalMem;
  info.memory_bus_bits = p.memoryBusWidth;
  info.max_smem_per_block_optin = p.sharedMemPerBlockOptin;
  // CUDA 13 dropped the clock fields from cudaDeviceProp; the attributes still exist.
  int clk = 0;
  if (cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev) == cudaSuccess) info.sm_clock_khz = clk;
  if (cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, dev) == cudaSuccess) info.memory_clock_khz = clk;
  (void)cudaGetLastError();
  std::size_t free_b = 0, total_b = 0;
  ATTN_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  info.free_memory_bytes = free_b;
  return info;
}

}  // namespace attn
