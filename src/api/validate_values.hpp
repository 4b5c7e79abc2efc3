// Checks of the values inside host int32 tensors: sequence offsets, used key counts, page indices.
// CUDA int32 tensors are trusted as given: reading their values would cost a device sync per call.
#pragma once

#include <cstdint>

#include "api/validate_tensor.hpp"

namespace hopattn::detail {

// cu_seqlens of `rows_name` ("q" or "k"): starts at 0, never decreases, ends at `total_rows`, and no
// sequence is longer than `max_seqlen` (named `max_name`).
Status check_cu_seqlens(const Arg& cu_seqlens, const char* rows_name, std::int64_t total_rows, int max_seqlen,
                        const char* max_name);

// seqused_k[b] in [0, keys available to sequence b]: cu_seqlens_k's length when given, else `capacity`.
Status check_seqused_k(const Arg& seqused_k, const Tensor* cu_seqlens_k, int capacity);

// Every entry of the (batch, pages_per_seq) table names a page of k/v: [0, num_pages).
Status check_page_table(const Arg& page_table, std::int64_t num_pages);

}  // namespace hopattn::detail
