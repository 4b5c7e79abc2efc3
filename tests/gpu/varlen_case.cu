#include "gpu/varlen_case.cuh"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "gpu/gpu_test_util.cuh"

namespace hopattn::test {
namespace {

void check_case_shape(const VarlenCase& c) {
  check_sequence_lengths(c);
  if ((c.trailing_k_rows != 0 && !c.varlen_k) || (c.unused_row_value && c.packed_qkv) || c.trailing_k_rows < 0)
    throw std::invalid_argument("test case: trailing k rows need varlen k, unused row values unpacked k and v");
}

}  // namespace

std::string VarlenCase::describe() const {
  std::ostringstream s;
  s << (varlen_q ? "varlen q " : "dense q ") << join(len_q) << (varlen_k ? " varlen k " : " dense k ") << join(len_k);
  if (seqused_k) s << " seqused_k " << join(*seqused_k);
  if (seqused_q) s << " seqused_q " << join(*seqused_q);
  describe_to(s);
  s << (packed_qkv ? " packed-qkv" : "");
  if (trailing_k_rows) s << " trailing k rows " << trailing_k_rows;
  if (unused_row_value) s << " unused rows " << *unused_row_value;
  return s.str();
}

std::string run_varlen_case(const VarlenCase& c, std::uint64_t seed) {
  try {
    check_case_shape(c);
    const int batch = c.batch(), hq = c.heads_q, d = c.head_dim;
    const std::vector<int> starts_q = prefix_sums(c.len_q), starts_k = prefix_sums(c.len_k);
    const int total_q = starts_q.back(), total_k = starts_k.back(), k_rows_stored = total_k + c.trailing_k_rows;

    const SequenceInputs in = make_sequence_inputs(c, starts_k, total_q, k_rows_stored, seed);
    const RowView &q = in.q, &k = in.k, &v = in.v;

    const PoisonedOutputs outputs(c.dtype, starts_q, c.varlen_q, hq, d, c.padded_rows, c.with_lse);

    std::optional<DeviceBuffer> cu_q, cu_k, seqused, seqused_q;
    if (c.varlen_q) cu_q = upload(starts_q);
    if (c.varlen_k) cu_k = upload(starts_k);
    if (c.seqused_k) seqused = upload(*c.seqused_k);
    if (c.seqused_q) seqused_q = upload(*c.seqused_q);
    FwdArgs args;
    args.q = q.api_tensor(starts_q, c.varlen_q);
    // A varlen k of k_rows_stored rows: the last sequence may end before the tensor does.
    std::vector<int> stored_k = starts_k;
    stored_k.back() = k_rows_stored;
    args.k = k.api_tensor(stored_k, c.varlen_k);
    args.v = v.api_tensor(stored_k, c.varlen_k);
    outputs.set_args(args, starts_q, c.varlen_q);
    if (cu_q) args.cu_seqlens_q = make_tensor(cu_q->data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
    if (cu_k) args.cu_seqlens_k = make_tensor(cu_k->data(), Dtype::kInt32, {batch + 1}, DeviceType::kCuda);
    if (seqused) args.seqused_k = make_tensor(seqused->data(), Dtype::kInt32, {batch}, DeviceType::kCuda);
    if (seqused_q) args.seqused_q = make_tensor(seqused_q->data(), Dtype::kInt32, {batch}, DeviceType::kCuda);
    // The true maxima, also on a dense side (where validation reads the length from the shape).
    args.max_seqlen_q = *std::max_element(c.len_q.begin(), c.len_q.end());
    args.max_seqlen_k = *std::max_element(c.len_k.begin(), c.len_k.end());
    c.set_args(args);
    if (std::string why = forward_problem(args); !why.empty()) return why;

    // The reference reads the stored rows, sequence b's first used_k(b) keys of its len_k[b] and
    // first used_q(b) queries of its len_q[b] (out and lse past those must keep their poison).
    SequenceRows rows;
    rows.starts_q = starts_q, rows.starts_k = starts_k;
    for (int b = 0; b < batch; ++b) {
      rows.len_q.push_back(c.used_q(b));
      rows.len_k.push_back(c.used_k(b));
    }
    rows.q = q, rows.k = k, rows.v = v;
    return check_sequences(c, rows, outputs);
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  }
}

VarlenCase varlen(std::vector<int> len_q, std::vector<int> len_k, int heads_q, int heads_kv, int head_dim,
                  Dtype dtype) {
  return varlen_case_of<VarlenCase>(std::move(len_q), std::move(len_k), heads_q, heads_kv, head_dim, dtype);
}

}  // namespace hopattn::test
