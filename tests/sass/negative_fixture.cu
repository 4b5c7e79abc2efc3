// Kernels that the SASS check must reject (tests/sass/check_forward_sass.py, CTest sass_check_rejects):
// named like forward instantiations, one 16-bit, one FP8, one 16-bit d 64 variable-length and one FP8
// d 64 variable-length, but with plain FMA math, ordinary global loads, and a dynamically indexed array
// that the compiler has to put in local memory (LDL/STL); and one named like a backward instantiation
// whose exponentials each sit behind a branch.
namespace hopattn_sass_fixture {

struct Bf16Tag {};
struct Fp8E4M3Tag {};

template <class Tag>
__global__ void attention_forward_kernel(const float* in, float* out, int n) {
  float scratch[64];
#pragma unroll 1
  for (int i = 0; i < 64; ++i) scratch[i] = in[(threadIdx.x + i) % n];
  out[threadIdx.x] = scratch[(threadIdx.x * 7 + n) % 64] * 2.0f;
}

// Named like a d 64 variable-length instantiation (FwdTraits<64, ..., warp-specialized, 2, varlen, ...>),
// which must also hold the transposed decoding loop's m64n8 GEMMs.
template <int kHeadDim, class Element, int kBlockN, int kStages, bool kWarpSpecialized, int kWarpgroups, bool kVarlen,
          bool kKvByCpAsync>
struct FwdTraits {};

// Named like an FP8 d 64 variable-length instantiation (Fp8FwdTraits<64, ..., V^T from global 0,
// varlen 1>), which must hold the FP8 transposed loop's m64n8 GEMMs.
template <int kHeadDim, bool kBlockDescales, bool kSoftcap, int kBlockN, bool kVtFromGlobal, bool kVarlen>
struct Fp8FwdTraits {};

template __global__ void attention_forward_kernel<Bf16Tag>(const float*, float*, int);
template __global__ void attention_forward_kernel<Fp8E4M3Tag>(const float*, float*, int);
template __global__ void attention_forward_kernel<FwdTraits<64, Bf16Tag, 192, 4, true, 2, true, false>>(const float*,
                                                                                                          float*, int);
template __global__ void attention_forward_kernel<Fp8FwdTraits<64, false, false, 128, false, true>>(const float*,
                                                                                                   float*, int);

// Each exponential followed by a loop (a branch that ptxas cannot predicate away) before the next, as
// the backward's per-element mask tests compiled before perf-notes v94.
template <class Tag>
__global__ void attention_backward_kernel(const float* in, float* out, int n) {
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    float p;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(p) : "f"(in[threadIdx.x + i]));
#pragma unroll 1
    for (int k = i; k < n; k += 16) p += in[k];
    sum += p;
  }
  out[threadIdx.x] = sum;
}

template __global__ void attention_backward_kernel<Bf16Tag>(const float*, float*, int);

}  // namespace hopattn_sass_fixture
