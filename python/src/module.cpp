// hopattn._C: the thin binding. It turns arrays into hopattn::Tensor views, calls the public C++ API
// with the GIL released, and raises on a failed Status. Output allocation, defaults and the
// flash-attention signatures live in python/hopattn/, where each array library is known.
#include <cuda_runtime.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "array_views.hpp"
#include "hopattn/hopattn.hpp"
#include "hopattn/quantize.hpp"
#include "status_error.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace hopattn::python {
namespace {

// Makes the GPU that holds `placement` current for the call and restores the caller's device after
// it, so that the Python side needs no device context of its own (entering torch.cuda.device or a
// CuPy Device from Python costs microseconds per call). Host arrays never touch the CUDA runtime.
class CurrentDevice {
 public:
  explicit CurrentDevice(const Tensor& placement) {
    if (placement.device != DeviceType::kCuda) return;
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();  // the library reports a missing GPU itself, with a clearer message
      previous_ = -1;
      return;
    }
    if (previous_ != placement.device_index && cudaSetDevice(placement.device_index) != cudaSuccess) {
      cudaGetLastError();  // an out-of-range index: the library's validation names it
    }
  }
  ~CurrentDevice() {
    int current = 0;
    if (previous_ >= 0 && cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};

// Runs `call` without the GIL (the CPU reference may take long) on the device of `placement`, then,
// when asked, waits for the stream: callers whose library exposes no stream (JAX) need the results
// finished on return.
template <typename Call>
void run_released(Call&& call, const Tensor& placement, std::uintptr_t stream, bool synchronize) {
  Status status;
  {
    nb::gil_scoped_release release;
    CurrentDevice device(placement);
    status = call();
    if (status.ok() && synchronize) {
      const cudaError_t error = cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream));
      if (error != cudaSuccess) {
        status = Status(StatusCode::kCudaError,
                        std::string("synchronizing the stream after the call: ") + cudaGetErrorString(error));
      }
    }
  }
  raise_if_error(status);
}

// The arguments forward and backward share (FwdArgs and BwdArgs name them alike).
template <class Args>
void set_masking_and_lengths(Args& args, ArrayViews& views, std::optional<float> softmax_scale, bool causal,
                             int window_left, int window_right, int attention_chunk, float softcap,
                             nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, int max_seqlen_q, int max_seqlen_k,
                             nb::handle seqused_k, nb::handle seqused_q) {
  args.softmax_scale = softmax_scale;
  args.causal = causal;
  args.window_left = window_left;
  args.window_right = window_right;
  args.attention_chunk = attention_chunk;  // 0 = off; the library rejects negative values
  args.softcap = softcap;
  args.cu_seqlens_q = views.optional_input(cu_seqlens_q, "cu_seqlens_q");
  args.cu_seqlens_k = views.optional_input(cu_seqlens_k, "cu_seqlens_k");
  args.max_seqlen_q = max_seqlen_q;
  args.max_seqlen_k = max_seqlen_k;
  args.seqused_k = views.optional_input(seqused_k, "seqused_k");
  args.seqused_q = views.optional_input(seqused_q, "seqused_q");
}

// flash-attention 3's pack_gqa: None leaves the choice to the kernels, True forces packing, False
// forbids it.
KernelOptions::PackGqa pack_gqa_option(std::optional<bool> pack_gqa) {
  if (!pack_gqa) return KernelOptions::PackGqa::kAuto;
  return *pack_gqa ? KernelOptions::PackGqa::kOn : KernelOptions::PackGqa::kOff;
}

void forward(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
             std::optional<float> softmax_scale, bool causal, int window_left, int window_right,
             int attention_chunk, float softcap, nb::handle learnable_sink, nb::handle qv,
             nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, int max_seqlen_q, int max_seqlen_k,
             nb::handle seqused_k, nb::handle seqused_q, nb::handle page_table, int num_splits,
             std::optional<bool> pack_gqa, nb::handle q_descale, nb::handle k_descale, nb::handle v_descale,
             nb::handle q_block_descale, nb::handle k_block_descale, nb::handle v_block_descale,
             int descale_block_rows_q, int descale_block_rows_kv, std::uintptr_t stream, bool raw_bits,
             bool synchronize) {
  ArrayViews views(raw_bits);
  FwdArgs args;
  args.q = views.input(q, "q");
  args.k = views.input(k, "k");
  args.v = views.input(v, "v");
  args.out = views.output(out, "out");
  args.lse = views.optional_output(lse, "lse");
  set_masking_and_lengths(args, views, softmax_scale, causal, window_left, window_right, attention_chunk, softcap,
                          cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, seqused_q);
  args.learnable_sink = views.optional_input(learnable_sink, "learnable_sink");
  args.qv = views.optional_input(qv, "qv");
  args.page_table = views.optional_input(page_table, "page_table");
  args.num_splits = num_splits;
  args.options.pack_gqa = pack_gqa_option(pack_gqa);
  args.q_descale = views.optional_input(q_descale, "q_descale");
  args.k_descale = views.optional_input(k_descale, "k_descale");
  args.v_descale = views.optional_input(v_descale, "v_descale");
  args.q_block_descale = views.optional_input(q_block_descale, "q_block_descale");
  args.k_block_descale = views.optional_input(k_block_descale, "k_block_descale");
  args.v_block_descale = views.optional_input(v_block_descale, "v_block_descale");
  args.descale_block_rows_q = descale_block_rows_q;
  args.descale_block_rows_kv = descale_block_rows_kv;
  args.stream = reinterpret_cast<void*>(stream);
  run_released([&] { return hopattn::forward(args); }, args.q, stream, synchronize);
}

void backward(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle dout, nb::handle lse,
              nb::handle dq, nb::handle dk, nb::handle dv, std::optional<float> softmax_scale, bool causal,
              int window_left, int window_right, int attention_chunk, float softcap, nb::handle learnable_sink,
              nb::handle dsink, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, int max_seqlen_q,
              int max_seqlen_k, nb::handle seqused_k, nb::handle seqused_q, bool deterministic, std::uintptr_t stream,
              bool raw_bits, bool synchronize) {
  ArrayViews views(raw_bits);
  BwdArgs args;
  args.q = views.input(q, "q");
  args.k = views.input(k, "k");
  args.v = views.input(v, "v");
  args.out = views.input(out, "out");
  args.dout = views.input(dout, "dout");
  args.lse = views.input(lse, "lse");
  args.dq = views.output(dq, "dq");
  args.dk = views.output(dk, "dk");
  args.dv = views.output(dv, "dv");
  set_masking_and_lengths(args, views, softmax_scale, causal, window_left, window_right, attention_chunk, softcap,
                          cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, seqused_q);
  args.learnable_sink = views.optional_input(learnable_sink, "learnable_sink");
  args.dsink = views.optional_output(dsink, "dsink");
  args.deterministic = deterministic;
  args.stream = reinterpret_cast<void*>(stream);
  run_released([&] { return hopattn::backward(args); }, args.q, stream, synchronize);
}

QuantGranularity parse_granularity(const std::string& name) {
  if (name == "tensor") return QuantGranularity::kPerTensor;
  if (name == "head") return QuantGranularity::kPerHead;
  if (name == "block") return QuantGranularity::kPerBlock;
  throw nb::value_error(("granularity: '" + name + "' is not one of 'block', 'head', 'tensor'").c_str());
}

void quantize_fp8(nb::handle q, nb::handle k, nb::handle v, nb::handle q8, nb::handle k8, nb::handle v8,
                  nb::handle q_descale, nb::handle k_descale, nb::handle v_descale, const std::string& granularity,
                  int block_rows_q, int block_rows_kv, bool hadamard, std::uint64_t seed, std::uintptr_t stream,
                  bool raw_bits, bool synchronize) {
  ArrayViews views(raw_bits);
  QuantizeArgs args;
  args.q = views.input(q, "q");
  args.k = views.input(k, "k");
  args.v = views.input(v, "v");
  args.q8 = views.output(q8, "q8");
  args.k8 = views.output(k8, "k8");
  args.v8 = views.output(v8, "v8");
  args.q_descale = views.output(q_descale, "q_descale");
  args.k_descale = views.output(k_descale, "k_descale");
  args.v_descale = views.output(v_descale, "v_descale");
  args.granularity = parse_granularity(granularity);
  args.block_rows_q = block_rows_q;
  args.block_rows_kv = block_rows_kv;
  args.hadamard = hadamard;
  args.seed = seed;
  args.stream = reinterpret_cast<void*>(stream);
  run_released([&] { return hopattn::quantize_fp8(args); }, args.q, stream, synchronize);
}

}  // namespace
}  // namespace hopattn::python

NB_MODULE(_C, m) {
  using namespace hopattn::python;
  m.doc() = "hopattn native binding; use the functions of the hopattn package instead.";
  m.def("forward", &forward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a = nb::none(), nb::kw_only(),
        "softmax_scale"_a = nb::none(), "causal"_a = false, "window_left"_a = -1, "window_right"_a = -1,
        "attention_chunk"_a = 0, "softcap"_a = 0.0f, "learnable_sink"_a = nb::none(), "qv"_a = nb::none(),
        "cu_seqlens_q"_a = nb::none(), "cu_seqlens_k"_a = nb::none(), "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0,
        "seqused_k"_a = nb::none(), "seqused_q"_a = nb::none(), "page_table"_a = nb::none(), "num_splits"_a = 0,
        "pack_gqa"_a = nb::none(), "q_descale"_a = nb::none(), "k_descale"_a = nb::none(),
        "v_descale"_a = nb::none(), "q_block_descale"_a = nb::none(), "k_block_descale"_a = nb::none(),
        "v_block_descale"_a = nb::none(),
        "descale_block_rows_q"_a = 128, "descale_block_rows_kv"_a = 128, "stream"_a = 0, "raw_bits"_a = false,
        "synchronize"_a = false,
        "Writes attention of q, k, v into out (and lse); see hopattn::FwdArgs.");
  m.def("backward", &backward, "q"_a, "k"_a, "v"_a, "out"_a, "dout"_a, "lse"_a, "dq"_a, "dk"_a, "dv"_a,
        nb::kw_only(), "softmax_scale"_a = nb::none(), "causal"_a = false, "window_left"_a = -1,
        "window_right"_a = -1, "attention_chunk"_a = 0, "softcap"_a = 0.0f, "learnable_sink"_a = nb::none(),
        "dsink"_a = nb::none(),
        "cu_seqlens_q"_a = nb::none(), "cu_seqlens_k"_a = nb::none(), "max_seqlen_q"_a = 0, "max_seqlen_k"_a = 0,
        "seqused_k"_a = nb::none(), "seqused_q"_a = nb::none(), "deterministic"_a = false, "stream"_a = 0,
        "raw_bits"_a = false, "synchronize"_a = false,
        "Writes the gradients dq, dk, dv (and dsink, when given); see hopattn::BwdArgs.");
  m.def("quantize_fp8", &quantize_fp8, "q"_a, "k"_a, "v"_a, "q8"_a, "k8"_a, "v8"_a, "q_descale"_a, "k_descale"_a,
        "v_descale"_a, nb::kw_only(), "granularity"_a = "block", "block_rows_q"_a = 128, "block_rows_kv"_a = 128,
        "hadamard"_a = false, "seed"_a = 0, "stream"_a = 0, "raw_bits"_a = false, "synchronize"_a = false,
        "Writes e4m3 codes of q, k, v into q8, k8, v8 and their float32 scales; see hopattn::QuantizeArgs.");
  m.def("hopper_available", &hopattn::hopper_available,
        "True when a compute capability 9.0 GPU is present and this build carries sm_90a kernels.");
  m.def("device_description", &hopattn::device_description,
        "One line naming the CUDA device in use, or why there is none.");
}
