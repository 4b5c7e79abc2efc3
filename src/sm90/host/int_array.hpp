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

}  // namespace hopattn::sm90
