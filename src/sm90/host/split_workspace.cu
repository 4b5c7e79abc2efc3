#include "sm90/host/split_workspace.hpp"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "sm90/host/capture_safe.hpp"

namespace hopattn::sm90 {
namespace {

Status pool_error(cudaError_t e, const char* what) {
  return Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

// One pool per device for the process's lifetime; the CUDA runtime releases it with the context.
Status device_pool(int device, cudaMemPool_t* pool) {
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = pools.find(device); it != pools.end()) {
    *pool = it->second;
    return Status::Ok();
  }
  const RelaxedCaptureScope relaxed;  // this may be the first call, under graph capture
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t created = nullptr;
  if (cudaError_t e = cudaMemPoolCreate(&created, &props); e != cudaSuccess)
    return pool_error(e, "creating the split-workspace memory pool");
  std::uint64_t keep_all = UINT64_MAX;
  if (cudaError_t e = cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &keep_all);
      e != cudaSuccess) {
    cudaMemPoolDestroy(created);
    return pool_error(e, "configuring the split-workspace memory pool");
  }
  pools[device] = created;
  *pool = created;
  return Status::Ok();
}

}  // namespace

Status acquire_split_workspace(int device, std::size_t bytes, cudaStream_t stream, void** workspace) {
  cudaMemPool_t pool = nullptr;
  if (Status st = device_pool(device, &pool); !st.ok()) return st;
  if (cudaError_t e = cudaMallocFromPoolAsync(workspace, bytes, pool, stream); e != cudaSuccess)
    return pool_error(e, ("allocating " + std::to_string(bytes) + " bytes of split workspace").c_str());
  return Status::Ok();
}

Status release_split_workspace(void* workspace, cudaStream_t stream) {
  if (cudaError_t e = cudaFreeAsync(workspace, stream); e != cudaSuccess)
    return pool_error(e, "freeing the split workspace");
  return Status::Ok();
}

}  // namespace hopattn::sm90
