// Kernels that the SASS check must reject (tests/sass/check_forward_sass.py, CTest sass_check_rejects):
// named like forward instantiations, one 16-bit and one FP8, but with plain FMA math, ordinary global
// loads, and a dynamically indexed array that the compiler has to put in local memory (LDL/STL).
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

template __global__ void attention_forward_kernel<Bf16Tag>(const float*, float*, int);
template __global__ void attention_forward_kernel<Fp8E4M3Tag>(const float*, float*, int);

}  // namespace hopattn_sass_fixture
