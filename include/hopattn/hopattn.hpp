// hopattn: FlashAttention-3-class attention for NVIDIA Hopper (sm_90a), with a CPU reference backend.
//
// Layouts follow flash-attention:
//   dense   q (batch, seqlen_q, heads_q, d)   k, v (batch, seqlen_k, heads_kv, d)   out like q
//   varlen  q (total_q, heads_q, d)           k, v (total_k, heads_kv, d)           out like q
//   paged   k, v (num_pages, page_size, heads_kv, d) indexed through page_table (batch, pages_per_seq)
//   lse     float32 (batch, heads_q, seqlen_q), or (heads_q, total_q) for varlen q; natural log.
// v may have a head dim d_v of its own (flash-attention 3's headdim_v; DeepSeek's attention: q/k 192,
// v 128): then out (and dout) end in d_v instead of d. The CPU reference backend takes any d_v in
// 1..512; the sm_90a kernels take d_v == d only (kUnsupported otherwise).
// Every tensor may have any strides as long as its last dimension is contiguous (one exception: an
// fp8 v may have its keys contiguous instead, see FwdArgs::v). Tensors on the host
// run on the CPU reference backend (float64 accumulation, d 1..512); tensors on a CUDA device run on
// the sm_90a kernels (bf16/fp16: d a multiple of 8 up to 256, forward and backward; fp8: d 64, 128
// or 256). Every call returns a Status; nothing throws and nothing aborts on bad input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace hopattn {

enum class Dtype : int { kFloat32, kFloat16, kBFloat16, kFloat8E4M3, kInt32 };
const char* dtype_name(Dtype dtype);
std::size_t dtype_size(Dtype dtype);

enum class DeviceType : int { kHost, kCuda };

constexpr int kMaxRank = 4;

// A non-owning view of a strided tensor. Strides are in elements. data may be null only when an
// extent is 0 (an empty host tensor; CUDA calls refuse empty tensors).
struct Tensor {
  void* data = nullptr;
  Dtype dtype = Dtype::kFloat32;
  int rank = 0;
  std::int64_t shape[kMaxRank] = {};
  std::int64_t stride[kMaxRank] = {};
  DeviceType device = DeviceType::kHost;
  int device_index = 0;

  std::int64_t numel() const;
};

// A contiguous (row-major) view.
Tensor make_tensor(void* data, Dtype dtype, std::initializer_list<std::int64_t> shape,
                   DeviceType device = DeviceType::kHost, int device_index = 0);

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed
  kUnsupported,      // well-formed, but this build or this device does not implement it
  kNoDevice,         // a CUDA tensor was given and no usable Hopper GPU is present
  kCudaError,        // the CUDA runtime reported an error
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Switches for the speed techniques of the sm_90a forward kernel, so each one can be measured on
// its own (ablation). Results are correct with any combination; the defaults are the fastest.
struct KernelOptions {
  bool warp_specialized = true;   // a TMA producer warp feeding consumer warpgroups
  bool pingpong = true;           // two consumer warpgroups alternate softmax and GEMMs (fp8 at
                                  // head dim 256 runs without: measured faster there)
  bool intra_wg_overlap = true;   // QK^T of tile j+1 issued before the softmax of tile j
  bool persistent = true;         // grid = SM count, tiles handed out by a scheduler
  // GQA packing (bf16/fp16): the query heads that share a K/V head fill one tile's rows together, so
  // a decoding step (a few query rows per head) computes and loads K/V once per K/V head instead of
  // once per query head. Head dims up to 128, warp-specialized kernels. kAuto packs where that needs
  // fewer tiles (GQA with fewer query rows than a tile holds); kOn packs any call it can (kUnsupported
  // at head dims above 128, without warp specialization, or for heads_q / heads_kv > 128); kOff never.
  enum class PackGqa { kAuto, kOn, kOff };
  PackGqa pack_gqa = PackGqa::kAuto;
  // How the bf16/fp16 variable-length, paged and decoding kernels (head dims up to 128) load K and V: TMA
  // boxes (issued by one producer thread, from a paged cache by two: K's and V's), or the producer
  // warpgroup's 16-byte copies (cp.async), which stream K/V from HBM about 10% faster. kAuto takes the
  // copies where a launch is bound by that stream (tiles of at most 64 query rows with at least 64 MiB of
  // K/V, dense or paged, or any such launch from rows at head dims up to 64), for every launch from pages
  // of at most 1 KB a tensor (16 keys at head dims up to 32: TMA loads those in many small boxes, and
  // pages under 16 keys or of sizes that are no power of two not at all, so those always take the copies),
  // from 2 KB pages (16 keys at d 64) past 4096 keys a tile (d 64's 192-key blocks: 12 boxes a block)
  // and for decoding steps from pages of up to 4 KB (16 keys at d 128, 16 and 32 at d 64); kCopyThreads
  // forces them where they exist (kUnsupported elsewhere: FP8, head dims above 128, or a launch that does
  // not take the variable-length kernels), kTma never.
  enum class KvLoads { kAuto, kTma, kCopyThreads };
  KvLoads kv_loads = KvLoads::kAuto;
  // The sm_90a forward kernels launched as programmatic dependents of the kernel queued before them
  // on the stream (CUDA's programmatic dependent launch): a kernel that lets its dependents launch
  // early (griddepcontrol.launch_dependents; every hopattn forward kernel does) then overlaps its end
  // with this call's launch and prologue, which wait for it before touching memory. Off: an ordinary
  // launch. Either way the call sees everything queued before it, and the kernel queued after it sees
  // everything it writes.
  bool programmatic_launch = true;
};

struct FwdArgs {
  // v may also be given with its keys contiguous (V^T in memory) when the inputs are float8_e4m3
  // and k/v are dense (rank 4, no cu_seqlens_k, no page_table): v.stride[1] == 1 instead of
  // v.stride[3] == 1, the logical shape unchanged, e.g. a (batch, heads_kv, head_dim, seqlen_k
  // padded) buffer viewed with strides (heads_kv * head_dim * padded, 1, head_dim * padded, padded).
  // There is no flag: the strides say it, and the ordinary layout is taken whenever stride[3] == 1 or
  // head_dim == 1. For CUDA tensors every stride but stride[1] must then be a multiple of 16 bytes
  // (padded a multiple of 16). The sm_90a FP8 kernel needs V^T tiles (the 8-bit wgmma's B operand
  // must be K-major) and loads them directly from such a v, skipping its in-kernel transpose of V.
  // quantize_fp8 can write v8 this way (hopattn/quantize.hpp).
  Tensor q, k, v, out;
  std::optional<Tensor> lse;  // float32, written when present

  std::optional<float> softmax_scale;  // default 1/sqrt(d)
  bool causal = false;                 // bottom-right aligned: query i sees keys j <= i + sk - sq
  int window_left = -1;                // -1 = unbounded
  int window_right = -1;               // -1 = unbounded (causal is window_right = 0)
  float softcap = 0.0f;                // 0 = off; else s -> softcap * tanh(s / softcap)
  // Chunked attention (Llama 4's local layers; flash-attention 3's attention_chunk): 0 = off; else the
  // keys are cut into chunks of attention_chunk ([0, c), [c, 2c), ...) and query i sees only keys of
  // the chunk that holds its diagonal key i + seqlen_k - seqlen_q, on top of causal and the window (a
  // row whose diagonal lies before key 0 sees no key). Must be >= 0.
  int attention_chunk = 0;
  // Attention sinks (gpt-oss; flash-attention's learnable_sink): float32 (heads_q), one logit per q
  // head that joins every row's softmax as a key with a zero value: out_i = sum_j exp(s_ij - lse_i) v_j
  // with lse_i = log(exp(sink_h) + sum_j exp(s_ij)), s_ij the scaled (and softcapped) scores. A row
  // that sees no key gets out 0 and lse sink_h. -inf for a head is no sink.
  std::optional<Tensor> learnable_sink;
  // flash-attention 3's qv (DeepSeek's multi-head latent attention, decoding with the projections
  // absorbed): a second query of v's head dim, in out's shape and q's dtype. The scores become
  // softmax_scale * (q_i . k_j + qv_i . v_j), and the default softmax_scale 1/sqrt(d + d_v). Forward
  // only (as in FA3: no backward takes it). The CPU reference backend takes it on 16/32-bit tensors;
  // the sm_90a MLA kernel on bf16/fp16 q/k of head dim 64 with v 512 (DeepSeek's decoding: dense or
  // paged k/v, seqused_k, causal, any GQA ratio, LSE, num_splits); other CUDA calls with qv, and
  // float8_e4m3 inputs, answer kUnsupported naming qv. FlashMLA's layout (q and the cache one row of
  // 512 latent then 64 rotary columns, the latent also v) is taken as column views of those arrays,
  // no copy: q = q_all[..., 512:], qv = q_all[..., :512], k = cache[..., 512:], v = cache[..., :512]
  // (strides in elements, as every Tensor; the Python flash_mla_with_kvcache does this).
  std::optional<Tensor> qv;

  // Variable-length batches: int32 prefix sums of length batch + 1. On CUDA tensors their values (and
  // seqused_k's) are trusted, as in flash-attention (checking them would need a device sync): the
  // first entry 0, non-decreasing, every query length <= max_seqlen_q. Host tensors are checked.
  std::optional<Tensor> cu_seqlens_q, cu_seqlens_k;
  int max_seqlen_q = 0, max_seqlen_k = 0;
  std::optional<Tensor> seqused_k;  // int32 (batch): keys actually used per sequence
  // int32 (batch): query rows actually used per sequence (flash-attention 3's seqused_q), dense or
  // variable-length q: sequence b's first seqused_q[b] rows, in [0, its rows]. Causal, the window and
  // chunks align to seqused_q[b]. The rows past it are not read, and their out and lse are not written
  // (they keep what the caller's memory holds, as in flash-attention 3). The sm_90a forward takes it
  // in its variable-length kernels (a dense q too; FP8 with v in the ordinary layout).
  std::optional<Tensor> seqused_q;

  // Paged KV cache: int32 (batch, pages_per_seq) of page indices into k and v (num_pages, page_size,
  // heads_kv, head_dim); seqused_k gives each sequence's keys in use. The sm_90a kernel takes page sizes
  // that are powers of two from 16, and any other (a token-granular cache: SGLang's page_size 1; vLLM's
  // hybrid-model sizes such as 528) with bf16/fp16 at head dims up to 128 unless KernelOptions::kv_loads
  // is kTma. Rows past a sequence's keys (the rest of its last page, rows past seqused_k, unused pages)
  // may hold anything, NaN and Inf included (a cache from torch.empty): they are never read into out or
  // lse.
  std::optional<Tensor> page_table;

  // Split-KV: the sm_90a kernels cut tiles along the keys over idle SMs and merge the pieces. Dense
  // batches: non-causal launches without a window; FP8 at head dims 64 and 128, not with block descales
  // alone. Variable-length and paged batches, and decoding steps of at most 64 query rows (bf16/fp16 at
  // head dims up to 128, any mask): every tile in the same number of pieces, each a share of its own
  // sequence's keys. 0 = where that shortens the launch (the last rounds' tiles, or every tile when
  // there are fewer tiles than SMs; variable lengths: when there are at most half as many tiles as SMs),
  // 1 = never, n >= 2 = every tile in n pieces (at most a key block a piece and 1024 pieces in all:
  // where tiles x n passes that, floor(1024 / tiles) pieces a tile, and no split where that is under 2).
  // Results match either way, to rounding. Split tiles of the kernels that copy K/V from rows
  // (KernelOptions::kv_loads; decoding steps) share their keys among their pieces as the pieces stream,
  // so those results vary run to run at rounding level (1 keeps such tiles whole).
  int num_splits = 0;

  // FP8 e4m3 inputs: float32 descale factors of shape (batch, heads_kv); out is bf16.
  std::optional<Tensor> q_descale, k_descale, v_descale;
  // FP8 per-block scales, the kPerBlock descales of quantize_fp8 (hopattn/quantize.hpp): float32
  // (batch, heads_q, ceil(seqlen_q / descale_block_rows_q)) for q, (batch, heads_kv,
  // ceil(seqlen_k / descale_block_rows_kv)) for k and v. Row i of q (key j of k, v; positions within
  // the sequence) is multiplied by entry i / descale_block_rows_q (j / descale_block_rows_kv), on top of
  // the per-head factor above when that is given too. Scales must be positive and finite, and the v
  // scales of one (batch, kv head) within a factor 2^90 of each other (O changes v units from block to
  // block in float; a v block of all zeros may take any scale in that range). The sm_90a
  // kernel needs descale_block_rows_q a multiple of 64 and descale_block_rows_kv a multiple of 128, or
  // at head dim 128 (and 64, v in the ordinary layout) of 192 or (dense batches) of 64: from 2048 keys
  // on (and at any length for rows that are not multiples of 128) those take 192-key blocks, fastest
  // where the rows are multiples of 192; at head dim 256 multiples of 96 take its faster 96-key
  // kernel, and (dense batches) multiples of 32 too (a little slower than 96-row descales).
  std::optional<Tensor> q_block_descale, k_block_descale, v_block_descale;
  int descale_block_rows_q = 128, descale_block_rows_kv = 128;

  void* stream = nullptr;  // cudaStream_t for CUDA tensors
  KernelOptions options;
};

struct BwdArgs {
  Tensor q, k, v, out, dout, lse;
  Tensor dq, dk, dv;

  std::optional<float> softmax_scale;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.0f;
  int attention_chunk = 0;  // as in FwdArgs
  // The forward's learnable_sink (FwdArgs; lse includes it), and where its gradient goes: dsink, float32
  // (heads_q), written when given (it needs learnable_sink): dsink_h = -sum over h's rows of
  // exp(sink_h - lse_i) * (dout_i . out_i), summed in a fixed order (reproducible).
  std::optional<Tensor> learnable_sink, dsink;

  // Variable-length batches, as in FwdArgs (the layouts at the top: lse (heads_q, total_q) for varlen
  // q). On CUDA tensors the values are trusted as there; with cu_seqlens_k the backward also needs
  // every key length <= max_seqlen_k (its grid covers that many keys per sequence). Keys past
  // seqused_k[b] get dk = dv = 0; as in the forward, their k and v rows may hold anything, NaN and Inf
  // included: they never reach dq, dk or dv. Query rows past seqused_q[b] (as in FwdArgs) get dq = 0,
  // and their q, out, dout and lse rows may hold anything likewise.
  std::optional<Tensor> cu_seqlens_q, cu_seqlens_k;
  int max_seqlen_q = 0, max_seqlen_k = 0;
  std::optional<Tensor> seqused_k, seqused_q;

  // Bitwise reproducible gradients: dq, dk and dv come out identical across runs with the same inputs,
  // shapes and device (and build). The sm_90a kernel sums dq over key blocks by reductions that, by
  // default, land in a run-to-run varying order (dq may differ in its last bits; dk and dv never do);
  // with this flag each q block's reductions wait their turn in a fixed key-block order, which costs
  // some time (on the H200, papers' grid: 0.84-0.98x the default's speed at head dim 128, 0.83-0.90x
  // at 64, 0.67-0.83x at 256).
  // The CPU reference backend is deterministic either way.
  bool deterministic = false;

  void* stream = nullptr;
};

Status forward(const FwdArgs& args);
Status backward(const BwdArgs& args);

// True when a CUDA device of compute capability 9.0 is present and this build carries sm_90a kernels.
bool hopper_available();
// One line naming the CUDA device in use, or why there is none.
std::string device_description();

}  // namespace hopattn
