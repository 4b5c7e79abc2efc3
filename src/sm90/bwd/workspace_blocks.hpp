// Where q rows lie in the backward's per-row workspaces (BwdParams::row_stats and dq_accum): in whole
// blocks of kBlockM rows, so that the main kernel loads a step's statistics as one TMA box and adds its
// dQ as one bulk reduction, without bounds checks. A block never holds rows of two sequences: a dQ
// reduction into it must not reach another sequence's rows.
//
// Each q head has a range of packed_q_blocks(rows, batch) blocks, and sequence b, whose rows start at
// row r0 of q (b * seqlen_q for a dense q), has its blocks from first_q_block(r0, b) = r0 / kBlockM + b
// on. Its ceil(len / kBlockM) blocks end at or before the next sequence's first, since r0 / B + ceil(len / B) <= (r0 + len) / B + 1 (integer division), and the
// last one's end at or before rows / B + batch: so the host sizes the workspace from q's row count,
// without reading cu_seqlens_q (a device array; reading it would need a sync).
// Plain C++ (constexpr, host and device) so that the CPU tests can check the bounds
// (tests/cpu/test_bwd_workspace_blocks.cpp).
#pragma once

#include <cstdint>

#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <int kBlockM>
HOPATTN_HOST_DEVICE constexpr int first_q_block(int row0, int sequence) {
  return row0 / kBlockM + sequence;
}

// Blocks of one q head's range: every sequence's blocks fit below it.
template <int kBlockM>
HOPATTN_HOST_DEVICE constexpr std::int64_t packed_q_blocks(std::int64_t rows, int batch) {
  return rows / kBlockM + batch;
}

}  // namespace hopattn::sm90
