// Host-side construction and sanity check of Fp8FwdParams: the shared FwdParams
// (sm90/fwd/params_builder.hpp) plus the descale views. Plain C++ so the CPU tests check exactly what
// launch_forward_fp8 passes to the kernel (tests/cpu/test_fp8_params.cpp).
#pragma once

#include <optional>
#include <string>

#include "api/problem.hpp"
#include "sm90/fwd/params_builder.hpp"
#include "sm90/fwd_fp8/params.hpp"

namespace hopattn::sm90 {

inline DescaleView fp8_descale_view(const std::optional<Tensor>& t, int rows_per_block) {
  if (!t) return DescaleView{nullptr, 0, 0, 0, 0};
  return DescaleView{static_cast<const float*>(t->data), t->stride[0], t->stride[1], t->rank > 2 ? t->stride[2] : 0,
                     rows_per_block};
}

// tile_counter stays null, as in make_fwd_params. group_keys: the kernel's keys per k/v descale group
// (Fp8FwdTraits::kDescaleGroupKeys), which descale_block_rows_kv must be a multiple of when k / v block
// descales are given. pack_gqa: as in make_fwd_params (the variable-length kernels; never with a q
// block descale).
inline Fp8FwdParams make_fp8_params(const FwdArgs& args, const detail::Problem& pr, int block_m, int group_keys,
                                    int heads_per_group, bool pack_gqa = false) {
  Fp8FwdParams fp{};
  fp.base = make_fwd_params(args, pr, block_m, heads_per_group, pack_gqa);
  fp.q_descale = fp8_descale_view(args.q_descale, 0);
  fp.k_descale = fp8_descale_view(args.k_descale, 0);
  fp.v_descale = fp8_descale_view(args.v_descale, 0);
  fp.q_block_descale = fp8_descale_view(args.q_block_descale, args.descale_block_rows_q);
  fp.k_block_descale = fp8_descale_view(args.k_block_descale, args.descale_block_rows_kv);
  fp.v_block_descale = fp8_descale_view(args.v_block_descale, args.descale_block_rows_kv);
  const bool kv_blocks = args.k_block_descale || args.v_block_descale;
  fp.kv_groups_per_descale =
      FastDivisor(kv_blocks ? static_cast<std::uint32_t>(args.descale_block_rows_kv / group_keys) : 1u);
  return fp;
}

// Empty when `fp` is launchable, else what is wrong (fwd_params_error, then the descale views: a
// per-block view the kernel divides by must have rows_per_block >= 1).
inline std::string fp8_params_error(const Fp8FwdParams& fp, int block_m) {
  if (std::string why = fwd_params_error(fp.base, block_m); !why.empty()) return why;
  const DescaleView* block_views[] = {&fp.q_block_descale, &fp.k_block_descale, &fp.v_block_descale};
  for (const DescaleView* v : block_views) {
    if (v->data != nullptr && v->rows_per_block < 1)
      return "Fp8FwdParams: a per-block descale view has rows_per_block " + std::to_string(v->rows_per_block) +
             ", expected >= 1";
  }
  if (fp.kv_groups_per_descale.divisor < 1)
    return "Fp8FwdParams: kv_groups_per_descale is 0 (descale_block_rows_kv below one descale group)";
  if (fp.base.pack_gqa && fp.q_block_descale.data != nullptr)
    return "Fp8FwdParams: pack_gqa with a q block descale (a packed tile's rows span query heads)";
  return std::string();
}

}  // namespace hopattn::sm90
