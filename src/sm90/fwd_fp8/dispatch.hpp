// The FP8 (e4m3) branch of sm90::forward (src/sm90/forward_fp8.cu).
#pragma once

#include "api/problem.hpp"

namespace hopattn::sm90 {

// For a problem sm90::forward already checked for the features the FP8 kernels lack (page sizes,
// softmax_scale <= 0); refuses warp_specialized = false and keys-contiguous v with variable lengths itself.
// varlen: sm90::forward's choice of the variable-length kernels (takes_varlen_kernels: variable
// lengths, seqused_k, a paged cache, or GQA packing asked for with pack_gqa = kOn).
Status forward_fp8(const FwdArgs& args, const detail::Problem& problem, bool varlen);

}  // namespace hopattn::sm90
