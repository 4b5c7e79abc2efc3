// The decoding shapes both forward suites run through the transposed decoding loops
// (fwd/transposed_decode.cuh, fwd_fp8/transposed_decode.cuh): batches whose tiles hold exactly 8 live
// rows (the loop's limit) beside tiles of 9 or more (the ordinary loop), packed and not; and those of
// the wide head dims' decoding kernel (FwdTraits::kDecodingOnly).
#pragma once

#include <vector>

#include "hopattn/hopattn.hpp"

namespace hopattn::test {

struct TransposedDecodeShape {
  const char* name;
  int heads_q, heads_kv;
  std::vector<int> len_q;  // query rows per sequence
  KernelOptions::PackGqa pack;
};

inline std::vector<TransposedDecodeShape> transposed_decode_shapes() {
  return {
      {"Ratio8", 16, 2, {1, 1, 1, 1}, KernelOptions::PackGqa::kAuto},          // 8 rows a packed tile
      {"Ratio4Drafts", 8, 2, {2, 1, 3, 2}, KernelOptions::PackGqa::kOn},       // 8, 4, 12, 8 rows
      {"Mha", 4, 4, {8, 9, 1, 5}, KernelOptions::PackGqa::kAuto},              // MHA steps of up to 9 rows
      {"Ratio2Unpacked", 4, 2, {1, 8, 9, 3}, KernelOptions::PackGqa::kOff},    // GQA left unpacked
  };
}

// The d 256 decoding kernel takes tiles of at most 8 live rows: packed up to that (ratio 8 x 1 row,
// ratio 2 x 4 draft rows, forced), unpacked beyond it (ratio 16, MHA drafts of up to 8 rows, pack_gqa
// off); 9 rows take the ordinary kernel.
inline std::vector<TransposedDecodeShape> wide_decode_shapes() {
  return {
      {"Ratio8", 16, 2, {1, 1, 1, 1}, KernelOptions::PackGqa::kAuto},
      {"Ratio2Drafts", 4, 2, {4, 1, 3, 2}, KernelOptions::PackGqa::kOn},
      {"Ratio16", 16, 1, {1, 1, 1, 1}, KernelOptions::PackGqa::kAuto},
      {"MhaDrafts", 4, 4, {8, 1, 5, 2}, KernelOptions::PackGqa::kAuto},
      {"Ratio2Unpacked", 4, 2, {1, 8, 3, 2}, KernelOptions::PackGqa::kOff},
      {"NineRows", 4, 4, {9, 1, 2, 1}, KernelOptions::PackGqa::kAuto},
  };
}

}  // namespace hopattn::test
