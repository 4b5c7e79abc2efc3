// Checks of one tensor argument at a time, each answering a Status whose message starts with the
// argument's name ("k: ...") and says what is allowed. validate.cpp composes them per call.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "hopattn/hopattn.hpp"

namespace hopattn::detail {

// An argument as the user named it, e.g. {"cu_seqlens_q", &*args.cu_seqlens_q}.
struct Arg {
  const char* name;
  const Tensor* tensor;
};

Status invalid(const std::string& message);
Status unsupported(const std::string& message);

// "(2, 7, 4, 64)"; never reads past kMaxRank whatever `rank` holds.
std::string shape_string(const Tensor& t);
// "host" or "cuda:1".
std::string device_string(const Tensor& t);

// What every tensor must satisfy before anything reads its shape: data non-null, a known dtype and
// device type, rank 1..kMaxRank, extents in [0, INT32_MAX], non-negative strides, a contiguous last
// dimension, element offsets that fit in int64, and a data pointer aligned to the element size.
// With `layout_checked_later` (v) all but the contiguous last dimension: check_v_layout decides v's.
Status check_well_formed(const Arg& arg, bool layout_checked_later = false);

// The two layouts of v (forward's v, quantize_fp8's v8). Ordinary: the last dimension contiguous.
// Keys contiguous: rank 4 (batch, seqlen_k, heads_kv, head_dim) with dimension 1 contiguous instead,
// i.e. V^T in memory, which the sm_90a FP8 kernel loads without transposing V in shared memory. A
// dimension of extent <= 1 counts as contiguous, and the ordinary layout wins when both hold.
bool keys_contiguous(const Tensor& t);
// Checks v's layout. `forbidden` is null where keys-contiguous v is allowed, else why it is not
// (e.g. "its dtype is bfloat16"). Sets *keys_contiguous_out.
Status check_v_layout(const Arg& v, const char* forbidden, bool* keys_contiguous_out);

Status check_dtype(const Arg& arg, Dtype expected);
Status check_rank(const Arg& arg, int rank, const char* layout);
// `expected` lists the extents; `layout` names them for the message, e.g. "(batch, heads_q, seqlen_q)".
Status check_shape(const Arg& arg, std::initializer_list<std::int64_t> expected, const char* layout);
// Same shape and dtype as `model` (e.g. out like q, v like k).
Status check_same_shape(const Arg& arg, const Arg& model);
// v: k's shape but for its head dim (the last), which may differ (flash-attention 3's headdim_v).
Status check_v_shape(const Arg& v, const Tensor& k);
// out (or dout): q's shape with v's head dim last.
Status check_out_shape(const Arg& out, const Arg& q, int head_dim_v);
Status check_same_dtype(const Arg& arg, const Arg& model, const char* rule);
Status check_same_device(const Arg& arg, const Arg& model);

// The sm_90a kernels load q/k/v/out tiles with TMA: 16-byte aligned base, and every stride but the
// contiguous dimension's (the last, or dimension 1 of a keys-contiguous v) a multiple of 16 bytes.
Status check_tma_compatible(const Arg& arg);
Status check_tma_strides(const Arg& arg);  // the stride half of the above

}  // namespace hopattn::detail

#define HOPATTN_RETURN_IF_ERROR(expr)         \
  do {                                        \
    ::hopattn::Status status_ = (expr);       \
    if (!status_.ok()) return status_;        \
  } while (false)
