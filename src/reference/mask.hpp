// Which keys a query row sees: bottom-right aligned causal / sliding-window / chunked masking.
#pragma once

#include <algorithm>
#include <cstdint>

namespace hopattn::reference {

// Keys [begin, end) of a sequence; empty when begin == end.
struct KeyRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
};

// Query i of a sequence with len_q queries and len_k keys sees key j iff j < len_k and
//   j >= i + len_k - len_q - window_left   (unless window_left < 0)
//   j <= i + len_k - len_q + window_right  (unless window_right < 0; causal is window_right = 0)
//   j lies in the chunk [c * chunk, (c + 1) * chunk) of the diagonal, c = floor((i + len_k - len_q)
//   / chunk)  (unless chunk == 0; a negative diagonal's chunk ends at or before key 0).
// Aligning the diagonal with the last key makes a decoding step (len_q = 1) see every key.
inline KeyRange visible_keys(int i, int len_q, int len_k, int window_left, int window_right, int chunk = 0) {
  const std::int64_t diagonal = static_cast<std::int64_t>(i) + len_k - len_q;
  std::int64_t begin = window_left < 0 ? 0 : std::max<std::int64_t>(0, diagonal - window_left);
  std::int64_t end = window_right < 0 ? len_k : std::min<std::int64_t>(len_k, diagonal + window_right + 1);
  if (chunk > 0) {
    const std::int64_t chunk_index = diagonal >= 0 ? diagonal / chunk : -((-diagonal + chunk - 1) / chunk);
    begin = std::max(begin, chunk_index * chunk);
    end = std::min(end, (chunk_index + 1) * chunk);
  }
  KeyRange range;
  range.begin = static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(begin, 0), len_k));
  range.end = static_cast<int>(std::max<std::int64_t>(end, range.begin));
  return range;
}

}  // namespace hopattn::reference
