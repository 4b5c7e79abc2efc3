#include "reference/fp8_quantize.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <vector>

namespace hopattn::reference {
namespace {

using detail::QuantizeJob;

float load_16bit(const void* p, Dtype dtype) {
  return dtype == Dtype::kBFloat16 ? __bfloat162float(*static_cast<const __nv_bfloat16*>(p))
                                   : __half2float(*static_cast<const __half*>(p));
}

// Row (b, s, h) of the job's input in float32 (exact: the inputs are 16-bit), transformed if asked.
void load_row(const QuantizeJob& job, const detail::HadamardSigns& signs, int b, int s, int h, float* row) {
  const Tensor& t = *job.in;
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(t.dtype));
  const char* base = static_cast<const char*>(t.data) + (b * t.stride[0] + s * t.stride[1] + h * t.stride[2]) * size;
  for (int j = 0; j < job.head_dim; ++j) row[j] = load_16bit(base + j * size, t.dtype);
  if (job.hadamard) incoherent_transform(row, job.head_dim, signs, job.hadamard_norm);
}

int blocks_of(const QuantizeJob& job, QuantGranularity g) {
  return static_cast<int>(scale_blocks(g, job.seqlen, job.block_rows));
}

// Index into the job's list of scale groups, (b, h, block) collapsed as the granularity says.
int group_of(const QuantizeJob& job, QuantGranularity g, int b, int h, int block) {
  switch (g) {
    case QuantGranularity::kPerTensor: return 0;
    case QuantGranularity::kPerHead: return b * job.heads + h;
    case QuantGranularity::kPerBlock: return (b * job.heads + h) * blocks_of(job, g) + block;
  }
  return 0;
}

void quantize_job(const QuantizeJob& job, QuantGranularity g, const detail::HadamardSigns& signs) {
  const int groups = g == QuantGranularity::kPerTensor ? 1
                     : g == QuantGranularity::kPerHead ? job.batch * job.heads
                                                       : job.batch * job.heads * blocks_of(job, g);
  std::vector<float> amax(groups, 0.0f);
  std::vector<float> row(job.head_dim);
  // Pass 1: amax per group. fmax ignores NaN, as the GPU's fmaxf does.
  for (int b = 0; b < job.batch; ++b) {
    for (int h = 0; h < job.heads; ++h) {
      for (int s = 0; s < job.seqlen; ++s) {
        load_row(job, signs, b, s, h, row.data());
        float& m = amax[group_of(job, g, b, h, s / job.block_rows)];
        for (float x : row) m = std::fmax(m, std::fabs(x));
      }
    }
  }
  // Pass 2: scales out, then codes (the row is recomputed, exactly as before).
  const Tensor& out = *job.out;
  const Tensor& descale = *job.descale;
  for (int b = 0; b < job.batch; ++b) {
    for (int h = 0; h < job.heads; ++h) {
      for (int block = 0; block < blocks_of(job, g); ++block) {
        const float amax_of_block = amax[group_of(job, g, b, h, block)];
        const float scale = detail::scale_from_amax(amax_of_block, job.power_of_two_scales);
        static_cast<float*>(descale.data)[detail::descale_offset(descale, g, b, h, block)] = scale;
      }
      for (int s = 0; s < job.seqlen; ++s) {
        load_row(job, signs, b, s, h, row.data());
        const float amax_of_row = amax[group_of(job, g, b, h, s / job.block_rows)];
        const float scale = detail::scale_from_amax(amax_of_row, job.power_of_two_scales);
        const float inverse_scale = detail::inverse_scale(scale);
        std::uint8_t* codes = static_cast<std::uint8_t*>(out.data) + b * out.stride[0] + s * out.stride[1] +
                              h * out.stride[2];
        // Stepping by stride[3]: v8 may have its keys contiguous instead of its columns.
        for (int j = 0; j < job.head_dim; ++j) codes[j * out.stride[3]] = quantize_e4m3(row[j], inverse_scale);
      }
    }
  }
}

}  // namespace

void fwht(float* x, int d) {
  for (int stride = 1; stride < detail::hadamard_block(d); stride *= 2) {
    for (int base = 0; base < d; base += 2 * stride) {
      for (int j = base; j < base + stride; ++j) {
        const float lo = x[j], hi = x[j + stride];
        x[j] = lo + hi;
        x[j + stride] = lo - hi;
      }
    }
  }
}

void incoherent_transform(float* x, int d, const detail::HadamardSigns& signs, float norm) {
  fwht(x, d);
  for (int j = 0; j < d; ++j) x[j] = (signs.negated(j) ? -x[j] : x[j]) * norm;
}

std::uint8_t quantize_e4m3(float x, float inverse_scale) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x * inverse_scale, __NV_SATFINITE, __NV_E4M3));
}

Status quantize_fp8(const detail::QuantizePlan& plan) {
  for (const QuantizeJob& job : plan.jobs) quantize_job(job, plan.granularity, plan.signs);
  return Status::Ok();
}

}  // namespace hopattn::reference
