// Which key block of which K/V head a backward CTA takes, from its place in dispatch order, and how
// many heads the deterministic kernels interleave. constexpr and __host__ __device__ so that the CPU
// tests can check the map (tests/cpu/test_bwd_cta_dispatch.cpp).
//
// The deterministic kernels' dQ reductions into a q block wait for the key blocks before them in a
// fixed order (dq_order.cuh). In increasing key-block order (no right window bound) every key block
// starts at q block 0, so key block n's first reduction waits for n links of the chain, each the
// previous writer's reduction, its completion and the poll that sees it. With a head's key blocks
// dispatched one after the other, the CTAs of one or two heads fill the GPU, and key block n's SM
// idles for n links before its writer frees the consumers' dQ buffers. Interleaving the key blocks
// of several heads in dispatch order (key block n of heads h .. h + G - 1, then key block n + 1 of
// them) spreads the resident CTAs over G heads, so each head's chain has to admit only 1/G of the
// dispatches (perf-notes v100).
#pragma once

#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

struct DispatchedKeyBlock {
  int n_block;
  int head;  // K/V head and batch entry together: kv_head + heads_kv * batch
};

// CTA `linear` (dispatch order: blockIdx.x fastest) of a grid of key_blocks x heads CTAs, in groups
// of `interleave` heads (the last group may have fewer): within a group, key block n of each head
// before key block n + 1 of any. `descending`: the key blocks run from the last down (the order of
// a right-bounded window's reductions, dq_order.cuh). Either way the CTA that reduces before this
// one into every q block they share (key block n - 1, or n + 1 descending, of the same head) comes
// earlier in dispatch order, which the no-deadlock argument of dq_order.cuh needs.
HOPATTN_HOST_DEVICE constexpr DispatchedKeyBlock dispatched_key_block(long long linear, int key_blocks, int heads,
                                                                     int interleave, bool descending) {
  const long long group_ctas = static_cast<long long>(interleave) * key_blocks;
  const int group = static_cast<int>(linear / group_ctas);
  const int within = static_cast<int>(linear - group * group_ctas);
  const int first_head = group * interleave;
  const int group_heads = heads - first_head < interleave ? heads - first_head : interleave;
  const int n = within / group_heads;
  return DispatchedKeyBlock{descending ? key_blocks - 1 - n : n, first_head + within % group_heads};
}

// The interleave of the deterministic kernels in increasing order: enough heads that each head's
// chain is asked for one CTA per link while the resident CTAs of all heads finish: sms CTAs finish
// per steps_per_cta steps, so G >= sms x (steps per link) / steps_per_cta (perf-notes v100 timed the
// steps per link: two measured better than four), at most all heads. steps_per_cta: the q blocks a CTA
// visits (q heads per K/V head x q blocks); sms: the GPU's SMs (one backward CTA each).
inline constexpr int kChainStepsPerLink = 2;
HOPATTN_HOST_DEVICE constexpr int dq_head_interleave(int steps_per_cta, int heads, int sms) {
  const int steps = steps_per_cta > 0 ? steps_per_cta : 1;
  const int wanted = (kChainStepsPerLink * sms + steps - 1) / steps;
  return wanted < 1 ? 1 : (wanted > heads ? heads : wanted);
}

}  // namespace hopattn::sm90
