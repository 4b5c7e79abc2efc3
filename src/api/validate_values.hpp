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

// seqused_k[b] (seqused_q[b]) in [0, the keys (query rows) sequence b has]: its cu_seqlens length when
// given, else `capacity`. `rows` names them in the message ("keys", "query rows").
Status check_seqused(const Arg& seqused, const Tensor* cu_seqlens, int capacity, const char* rows);

// Every entry of the (batch, pages_per_seq) table names a page of k/v: [0, num_pages).
Status check_page_table(const Arg& page_table, std::int64_t num_pages);

}  // namespace hopattn::detail
