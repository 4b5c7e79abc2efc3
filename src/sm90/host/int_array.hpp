// The int32 arrays of a call (cu_seqlens_q/k, seqused_k, page_table) as the kernels' params carry them:
// a pointer, nullptr for an argument not given. Shared by the forward and backward params builders;
// plain C++, as they are.
#pragma once

#include <optional>

#include "hopattn/hopattn.hpp"

namespace hopattn::sm90 {

inline const int* int_array_or_null(const std::optional<Tensor>& t) {
  return t ? static_cast<const int*>(t->data) : nullptr;
}

// A paged cache's table (batch, pages_per_seq) and page size into the params of any kernel that reads
// one (FwdParams, MlaParams): the same four fields, strides in entries.
template <class Params>
void set_page_table(Params& p, const Tensor& page_table, int page_size) {
  p.page_table = static_cast<const int*>(page_table.data);
  p.page_table_batch_stride = page_table.stride[0];
  p.page_table_page_stride = page_table.stride[1];
  p.page_size = page_size;
}

}  // namespace hopattn::sm90
