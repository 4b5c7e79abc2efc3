// A TMA tiled load of a (batch, rows, heads, cols) tensor box into smem with the 128B swizzle,
// completing on an mbarrier, compared byte for byte with the CPU swizzle function; the box hangs off
// the end of the rows so the out-of-bounds zero fill is checked too.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "gpu_test_util.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/tma.cuh"
#include "sm90/host/tensor_map.hpp"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {
namespace {

constexpr int kBoxRows = 64;
constexpr int kCols = 128;  // two 64-column boxes
using Tile = SwizzledTile<kBoxRows, kCols, 2>;

__global__ void tma_kernel(const __grid_constant__ CUtensorMap map, int row0, int head, int batch,
                           std::uint8_t* out) {
  __shared__ alignas(1024) std::uint8_t tile[Tile::kBytes];
  __shared__ std::uint64_t full;
  if (threadIdx.x == 0) {
    mbarrier_init(&full, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&full, Tile::kBytes);
    for (int cb = 0; cb < Tile::kColumnBlocks; ++cb)
      tma_load_4d(tile + cb * Tile::kColumnBlockBytes, &map, &full, cb * 64, row0, head, batch);
  }
  mbarrier_wait(&full, 0);
  for (int i = threadIdx.x; i < Tile::kBytes; i += blockDim.x) out[i] = tile[i];
}

class ArchTma : public test::HopperTest {};

TEST_F(ArchTma, SwizzledBoxWithOutOfBoundsRowsMatchesCpu) {
  const int batch = 2, rows = 100, heads = 3;  // rows not a multiple of the box: the last box hangs over
  std::mt19937 gen(std::random_device{}());
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<__nv_bfloat16> x(std::size_t(batch) * rows * heads * kCols);
  for (auto& v : x) v = __float2bfloat16(dist(gen));
  test::DeviceBuffer dx(x.size() * 2), dout(Tile::kBytes);
  HOPATTN_CUDA_CHECK(cudaMemcpy(dx.data(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CUtensorMap map;
  BshdView view{dx.data(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, batch, rows, heads, kCols,
                std::int64_t(rows) * heads * kCols, std::int64_t(heads) * kCols, kCols};
  Status st = make_tensor_map(&map, view, 64, kBoxRows);
  ASSERT_TRUE(st.ok()) << st.message();
  const int row0 = 64, head = 2, b = 1;
  HOPATTN_CUDA_CHECK(cudaMemset(dout.data(), 0xFF, Tile::kBytes));
  tma_kernel<<<1, 128>>>(map, row0, head, b, dout.as<std::uint8_t>());
  HOPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> tile(Tile::kBytes / 2);
  HOPATTN_CUDA_CHECK(cudaMemcpy(tile.data(), dout.data(), Tile::kBytes, cudaMemcpyDeviceToHost));
  for (int r = 0; r < kBoxRows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      const float got = __bfloat162float(tile[Tile::offset(r, c) / 2]);
      const int row = row0 + r;
      const float want =
          row < rows ? __bfloat162float(x[((std::size_t(b) * rows + row) * heads + head) * kCols + c]) : 0.0f;
      ASSERT_EQ(got, want) << "row " << r << " col " << c;
    }
  }
}

}  // namespace
}  // namespace hopattn::sm90
