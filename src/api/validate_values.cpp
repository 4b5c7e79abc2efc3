#include "api/validate_values.hpp"

#include <string>

namespace hopattn::detail {
namespace {

std::int64_t at(const Tensor& t, std::int64_t i, std::int64_t j = 0) {
  const std::int64_t offset = i * t.stride[0] + (t.rank > 1 ? j * t.stride[1] : 0);
  return static_cast<const std::int32_t*>(t.data)[offset];
}

std::string str(std::int64_t v) { return std::to_string(v); }

}  // namespace

Status check_cu_seqlens(const Arg& cu_seqlens, const char* rows_name, std::int64_t total_rows, int max_seqlen,
                        const char* max_name) {
  const Tensor& t = *cu_seqlens.tensor;
  const std::string name = cu_seqlens.name;
  if (at(t, 0) != 0) return invalid(name + ": entry 0 is " + str(at(t, 0)) + "; cu_seqlens must start at 0");
  const std::int64_t batch = t.shape[0] - 1;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t length = at(t, b + 1) - at(t, b);
    if (length < 0)
      return invalid(name + ": entry " + str(b + 1) + " (" + str(at(t, b + 1)) + ") is less than entry " + str(b) +
                     " (" + str(at(t, b)) + "); cu_seqlens must be non-decreasing");
    if (length > max_seqlen)
      return invalid(name + ": sequence " + str(b) + " has length " + str(length) + " > " + max_name + " " +
                     str(max_seqlen) + "; every sequence length must be <= " + max_name);
  }
  if (at(t, batch) != total_rows)
    return invalid(name + ": last entry " + str(at(t, batch)) + " does not equal the " + str(total_rows) +
                   " rows of " + rows_name + "; the last entry must be " + rows_name + "'s row count");
  return Status::Ok();
}

Status check_seqused(const Arg& seqused, const Tensor* cu_seqlens, int capacity, const char* rows) {
  const Tensor& t = *seqused.tensor;
  for (std::int64_t b = 0; b < t.shape[0]; ++b) {
    const std::int64_t available = cu_seqlens ? at(*cu_seqlens, b + 1) - at(*cu_seqlens, b) : capacity;
    const std::int64_t used = at(t, b);
    if (used < 0 || used > available)
      return invalid(std::string(seqused.name) + ": entry " + str(b) + " is " + str(used) + "; it must be in [0, " +
                     str(available) + "], the " + rows + " sequence " + str(b) + " has");
  }
  return Status::Ok();
}

Status check_page_table(const Arg& page_table, std::int64_t num_pages) {
  const Tensor& t = *page_table.tensor;
  for (std::int64_t b = 0; b < t.shape[0]; ++b) {
    for (std::int64_t p = 0; p < t.shape[1]; ++p) {
      const std::int64_t page = at(t, b, p);
      if (page < 0 || page >= num_pages)
        return invalid(std::string(page_table.name) + ": entry (" + str(b) + ", " + str(p) + ") is " + str(page) +
                       "; page indices must be in [0, " + str(num_pages) + "), the pages of k and v");
    }
  }
  return Status::Ok();
}

}  // namespace hopattn::detail
