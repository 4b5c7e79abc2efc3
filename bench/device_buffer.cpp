#include "device_buffer.hpp"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

namespace hopattn::bench {

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() {
  if (data_ != nullptr) cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
}

Status DeviceBuffer::allocate(std::size_t bytes) {
  release();
  if (cudaError_t error = cudaMalloc(&data_, bytes); error != cudaSuccess) {
    data_ = nullptr;
    cudaGetLastError();  // an out-of-memory error is not sticky: clear it so later rows still run
    return Status(StatusCode::kCudaError,
                  "cudaMalloc of " + std::to_string(bytes >> 20) + " MiB: " + cudaGetErrorString(error));
  }
  bytes_ = bytes;
  return Status::Ok();
}

}  // namespace hopattn::bench
