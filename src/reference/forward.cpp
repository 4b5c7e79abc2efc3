// Reference forward: out_i = sum_j P_ij v_j over the keys query i sees, LSE_i = log sum_j exp(s_ij)
// (plus exp(sink) with a learnable sink), all in float64. Rows that see no key get out 0 and LSE -inf
// (the sink with one). Rows past seqused_q[b] are not touched. With qv, s_ij takes qv_i . v_j too.
#include <algorithm>
#include <cmath>

#include "reference/attention_row.hpp"
#include "reference/reference.hpp"
#include "reference/tensor_access.hpp"

namespace hopattn::reference {
namespace {

// The fp8 descale of (sequence b, kv head h), 1 when the factor is absent.
double descale(const std::optional<Tensor>& factors, int b, int kv_head) {
  return factors ? load_scalar(element_ptr(*factors, b, kv_head), factors->dtype) : 1.0;
}

// The fp8 per-block scale of row `row` of (sequence b, head h), 1 when the factor is absent.
double block_descale(const std::optional<Tensor>& factors, int b, int head, int row, int rows_per_block) {
  return factors ? load_scalar(element_ptr(*factors, b, head, row / rows_per_block), factors->dtype) : 1.0;
}

}  // namespace

Status forward(const FwdArgs& args, const detail::Problem& problem) {
  const SequenceLayout layout(problem, args.cu_seqlens_q, args.cu_seqlens_k, args.seqused_k, args.seqused_q,
                              args.page_table);
  const int d = problem.head_dim, dv = problem.head_dim_v;
  const int group = problem.heads_q / problem.heads_kv;
  const int window_right = problem.causal ? 0 : problem.window_right;
  std::vector<double> q(d), qv(dv), out_row(dv);

  for (int b = 0; b < problem.batch; ++b) {
    const int len_q = layout.len_q(b), len_k = layout.len_k(b);
    for (int kv_head = 0; kv_head < problem.heads_kv; ++kv_head) {
      Matrix k(len_k, d), v(len_k, dv);
      const double k_scale = descale(args.k_descale, b, kv_head);
      const double v_scale = descale(args.v_descale, b, kv_head);
      for (int j = 0; j < len_k; ++j) {
        const int rows = args.descale_block_rows_kv;
        load_row(args.k, layout.k_row(args.k, b, j, kv_head), d,
                 k_scale * block_descale(args.k_block_descale, b, kv_head, j, rows), k.row(j));
        load_row(args.v, layout.k_row(args.v, b, j, kv_head), dv,
                 v_scale * block_descale(args.v_block_descale, b, kv_head, j, rows), v.row(j));
      }
      // q's descale is indexed by the kv head its q head reads, as in flash-attention.
      const double q_scale = descale(args.q_descale, b, kv_head);
      for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        const double sink = learnable_sink(args.learnable_sink, h);
        for (int i = 0; i < len_q; ++i) {
          load_row(args.q, layout.q_row(args.q, b, i, h), d,
                   q_scale * block_descale(args.q_block_descale, b, h, i, args.descale_block_rows_q), q.data());
          if (args.qv) load_row(*args.qv, layout.q_row(*args.qv, b, i, h), dv, 1.0, qv.data());
          const KeyRange keys =
              visible_keys(i, len_q, len_k, problem.window_left, window_right, problem.attention_chunk);
          const RowSoftmax row = row_softmax(q.data(), k, keys, problem.softmax_scale, problem.softcap, sink,
                                             args.qv ? qv.data() : nullptr, &v);
          std::fill(out_row.begin(), out_row.end(), 0.0);
          for (int j = keys.begin; j < keys.end; ++j) {
            const double p = row.probs[j - keys.begin];
            const double* vj = v.row(j);
            for (int c = 0; c < dv; ++c) out_row[c] += p * vj[c];
          }
          store_row(layout.q_row(args.out, b, i, h), args.out.dtype, dv, out_row.data());
          if (args.lse) store_scalar(layout.lse_entry(*args.lse, b, h, i), args.lse->dtype, row.lse);
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace hopattn::reference
