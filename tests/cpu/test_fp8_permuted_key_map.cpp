// When the FP8 kernel with v keys-contiguous loads K's permuted rows in one TMA box per block
// (host/tensor_map.hpp, permuted_block_map_applies): only where heads and batches fold into the 5D
// map's first and last coordinates. Elsewhere it falls back to two boxes per 16-key group.
#include <gtest/gtest.h>

#if HOPATTN_TEST_SM90_BUILD
#include "sm90/host/tensor_map.hpp"

namespace hopattn::sm90 {
namespace {

// A contiguous e4m3 (batch, rows, heads, cols) tensor.
BshdView contiguous_k(std::int64_t batch, std::int64_t rows, std::int64_t heads, std::int64_t cols) {
  return BshdView{nullptr, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, batch, rows, heads, cols,
                  rows * heads * cols, heads * cols, cols};
}

TEST(Fp8PermutedKeyMap, OneBoxPerBlockOnlyWhereHeadsAndBatchesFold) {
  EXPECT_TRUE(permuted_block_map_applies(contiguous_k(2, 16384, 16, 128)));
  EXPECT_TRUE(permuted_block_map_applies(contiguous_k(3, 1024, 2, 64)));
  EXPECT_TRUE(permuted_block_map_applies(contiguous_k(1, 16, 1, 256)));
  // Keys not a whole number of 16-key groups: a batch's last group would run into the next batch.
  EXPECT_FALSE(permuted_block_map_applies(contiguous_k(2, 8333, 16, 128)));
  // ... which one batch has not: only blocks wholly inside the keys go through the map.
  EXPECT_TRUE(permuted_block_map_applies(contiguous_k(1, 1000, 4, 128)));
  // Heads not side by side in a row (a padded head stride).
  BshdView padded_heads = contiguous_k(2, 1024, 4, 128);
  padded_heads.head_stride = 144, padded_heads.row_stride = 4 * 144, padded_heads.batch_stride = 1024 * 4 * 144;
  EXPECT_FALSE(permuted_block_map_applies(padded_heads));
  // Batches not back to back (a padded batch stride, e.g. a cache longer than seqlen_k).
  BshdView padded_batches = contiguous_k(2, 1024, 4, 128);
  padded_batches.batch_stride += 16 * 4 * 128;
  EXPECT_FALSE(permuted_block_map_applies(padded_batches));
  // One batch: its stride never steps (a batch-1 view of a longer cache still folds).
  padded_batches.batch = 1;
  EXPECT_TRUE(permuted_block_map_applies(padded_batches));
}

}  // namespace
}  // namespace hopattn::sm90
#endif
