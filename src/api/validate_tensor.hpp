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
Status check_well_formed(const Arg& arg);

Status check_dtype(const Arg& arg, Dtype expected);
Status check_rank(const Arg& arg, int rank, const char* layout);
// `expected` lists the extents; `layout` names them for the message, e.g. "(batch, heads_q, seqlen_q)".
Status check_shape(const Arg& arg, std::initializer_list<std::int64_t> expected, const char* layout);
// Same shape and dtype as `model` (e.g. out like q, v like k).
Status check_same_shape(const Arg& arg, const Arg& model);
Status check_same_dtype(const Arg& arg, const Arg& model, const char* rule);
Status check_same_device(const Arg& arg, const Arg& model);

// The sm_90a kernels load q/k/v/out tiles with TMA: 16-byte aligned base, strides multiples of 16 bytes.
Status check_tma_compatible(const Arg& arg);

}  // namespace hopattn::detail

#define HOPATTN_RETURN_IF_ERROR(expr)         \
  do {                                        \
    ::hopattn::Status status_ = (expr);       \
    if (!status_.ok()) return status_;        \
  } while (false)
