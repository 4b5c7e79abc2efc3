// Reference backward: dq, dk, dv of the exact forward function, in float64.
//
// P is recomputed from q and k rather than taken from the lse/out arguments: those are rounded
// (float32 LSE, out in the input dtype), and the reference must be the gradient of the exact forward.
// With dP_ij = dout_i . v_j and D_i = sum_j P_ij dP_ij, the score gradient is dS_ij = P_ij (dP_ij - D_i),
// times 1 - tanh^2 under softcap; then dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i,
// dv_j = sum_i P_ij dout_i. A kv head's dk/dv sum over the q heads that read it (GQA). Masked entries
// contribute nothing, and every gradient element no row reaches (empty rows, unused keys, query rows
// past seqused_q) is 0. A learnable sink is a key with score sink_h and value 0: it joins P's
// normalization, and its own gradient is dsink_h = sum_i P_i,sink (0 - D_i).
#include <algorithm>

#include "reference/attention_row.hpp"
#include "reference/reference.hpp"
#include "reference/tensor_access.hpp"

namespace hopattn::reference {

Status backward(const BwdArgs& args, const detail::Problem& problem) {
  const SequenceLayout layout(problem, args.cu_seqlens_q, args.cu_seqlens_k, args.seqused_k, args.seqused_q,
                              std::nullopt);
  const int d = problem.head_dim, dv_dim = problem.head_dim_v;
  const int group = problem.heads_q / problem.heads_kv;
  const int window_right = problem.causal ? 0 : problem.window_right;
  const double scale = problem.softmax_scale;
  fill_tensor(args.dq, 0.0);
  fill_tensor(args.dk, 0.0);
  fill_tensor(args.dv, 0.0);
  std::vector<double> dsink(problem.heads_q, 0.0);

  for (int b = 0; b < problem.batch; ++b) {
    const int len_q = layout.len_q(b), len_k = layout.len_k(b);
    for (int kv_head = 0; kv_head < problem.heads_kv; ++kv_head) {
      Matrix k(len_k, d), v(len_k, dv_dim), dk(len_k, d), dv(len_k, dv_dim);
      for (int j = 0; j < len_k; ++j) {
        load_row(args.k, layout.k_row(args.k, b, j, kv_head), d, 1.0, k.row(j));
        load_row(args.v, layout.k_row(args.v, b, j, kv_head), dv_dim, 1.0, v.row(j));
      }
      std::vector<double> q(d), dout(dv_dim), dq(d), ds;
      for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        const double sink = learnable_sink(args.learnable_sink, h);
        for (int i = 0; i < len_q; ++i) {
          load_row(args.q, layout.q_row(args.q, b, i, h), d, 1.0, q.data());
          load_row(args.dout, layout.q_row(args.dout, b, i, h), dv_dim, 1.0, dout.data());
          const KeyRange keys =
              visible_keys(i, len_q, len_k, problem.window_left, window_right, problem.attention_chunk);
          const RowSoftmax row = row_softmax(q.data(), k, keys, scale, problem.softcap, sink);
          ds.assign(keys.size(), 0.0);
          double row_dot = 0.0;  // D_i
          for (int j = keys.begin; j < keys.end; ++j) {
            const double* vj = v.row(j);
            double dp = 0.0;
            for (int c = 0; c < dv_dim; ++c) dp += dout[c] * vj[c];
            ds[j - keys.begin] = dp;
            row_dot += row.probs[j - keys.begin] * dp;
          }
          dsink[h] -= row.sink_prob * row_dot;
          std::fill(dq.begin(), dq.end(), 0.0);
          for (int j = keys.begin; j < keys.end; ++j) {
            const double p = row.probs[j - keys.begin];
            const double dscore = p * (ds[j - keys.begin] - row_dot) * row.cap_slope[j - keys.begin] * scale;
            const double* kj = k.row(j);
            double* dkj = dk.row(j);
            double* dvj = dv.row(j);
            for (int c = 0; c < d; ++c) {
              dq[c] += dscore * kj[c];
              dkj[c] += dscore * q[c];
            }
            for (int c = 0; c < dv_dim; ++c) dvj[c] += p * dout[c];
          }
          store_row(layout.q_row(args.dq, b, i, h), args.dq.dtype, d, dq.data());
        }
      }
      for (int j = 0; j < len_k; ++j) {
        store_row(layout.k_row(args.dk, b, j, kv_head), args.dk.dtype, d, dk.row(j));
        store_row(layout.k_row(args.dv, b, j, kv_head), args.dv.dtype, dv_dim, dv.row(j));
      }
    }
  }
  if (args.dsink)
    for (int h = 0; h < problem.heads_q; ++h) store_scalar(element_ptr(*args.dsink, h), args.dsink->dtype, dsink[h]);
  return Status::Ok();
}

}  // namespace hopattn::reference
