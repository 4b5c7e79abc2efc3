// Owned device memory (cudaMalloc/cudaFree), move-only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hopattn/hopattn.hpp"

namespace hopattn::bench {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  Status allocate(std::size_t bytes);
  void* get() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release();
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace hopattn::bench
