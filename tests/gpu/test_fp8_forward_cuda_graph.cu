// The FP8 forward under CUDA graph capture: split launches (the forward and combine kernels, the
// stream-ordered workspace, a block-descale plan) replay what a direct call writes, bit for bit.
#include <cstdint>
#include <random>
#include <string>

#include "gpu/fp8_case.cuh"
#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

// Inference engines capture decoding steps in CUDA graphs: a split launch (the forward kernel, the
// combine kernel with its programmatic-serialization launch, the stream-ordered workspace) must
// capture, and its replays must write what a direct call writes, bit for bit; captured before and
// after a direct call (run alone, as scripts/device_tests.sh does, the first capture is the
// process's first call). Decoding with split-KV, and a tail split of the last round.
TEST_F(Fp8Forward, CudaGraphReplayMatchesTheDirectCall) {
  const std::uint64_t seed = run_seed();
  const int sms = multiprocessor_count();
  const DenseExtents shapes[] = {{2, 8, 2, 1, 8333, 128}, {1, 3, 1, 128 * ((sms + 5) / 3) - 37, 700, 64}};
  int index = 0;
  for (const DenseExtents& sh : shapes) {
    const std::int64_t nq = std::int64_t(sh.batch) * sh.seqlen_q * sh.heads_q * sh.head_dim;
    const std::int64_t nkv = std::int64_t(sh.batch) * sh.seqlen_k * sh.heads_kv * sh.head_dim;
    DeviceBuffer q = random_e4m3(nq, splitmix64(seed + index++), 3.0f);
    DeviceBuffer k = random_e4m3(nkv, splitmix64(seed + index++), 1.0f);
    DeviceBuffer v = random_e4m3(nkv, splitmix64(seed + index++), 1.0f);
    DeviceBuffer out(nq * 2), lse(std::int64_t(sh.batch) * sh.heads_q * sh.seqlen_q * 4);
    const FwdArgs args = dense_cuda_args(sh, Dtype::kFloat8E4M3, Dtype::kBFloat16, q.data(), k.data(), v.data(),
                                         out.data(), lse.data());
    for (bool capture_first : {true, false}) {
      const std::string why = graph_replay_mismatch(args, capture_first);
      EXPECT_TRUE(why.empty()) << "b " << sh.batch << " hq " << sh.heads_q << " sq " << sh.seqlen_q << " sk "
                               << sh.seqlen_k << " d " << sh.head_dim << (capture_first ? " captured first" : "")
                               << " (HOPATTN_TEST_SEED=" << seed << "): " << why;
    }
    if (sh.head_dim != 128) continue;
    // 128-row k/v block descales at d 128 over 2048 keys: the grouped 192-key kernel, whose descale
    // plan is computed in stream-ordered scratch memory before it (fwd_fp8/launch.cuh).
    std::mt19937_64 rng(splitmix64(seed + index++));
    const int blocks_kv = (sh.seqlen_k + 127) / 128;
    DeviceBuffer k_block = random_scales(std::int64_t(sh.batch) * sh.heads_kv * blocks_kv, rng, 0.25f, 2.0f);
    DeviceBuffer v_block = random_v_block_scales(std::int64_t(sh.batch) * sh.heads_kv * blocks_kv, rng);
    FwdArgs blocked = args;
    blocked.k_block_descale =
        make_tensor(k_block.data(), Dtype::kFloat32, {sh.batch, sh.heads_kv, blocks_kv}, DeviceType::kCuda);
    blocked.v_block_descale =
        make_tensor(v_block.data(), Dtype::kFloat32, {sh.batch, sh.heads_kv, blocks_kv}, DeviceType::kCuda);
    for (bool capture_first : {true, false}) {
      const std::string why = graph_replay_mismatch(blocked, capture_first);
      EXPECT_TRUE(why.empty()) << "128-row k/v block descales, sk " << sh.seqlen_k
                               << (capture_first ? " captured first" : "") << " (HOPATTN_TEST_SEED=" << seed
                               << "): " << why;
    }
  }
}

}  // namespace
}  // namespace hopattn::test
