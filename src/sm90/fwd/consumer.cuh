// A consumer warpgroup: 64 query rows of the CTA tile. Per K/V block it computes S = Q K^T (Q from
// registers at head dim <= 128, loaded once per tile, else from swizzled smem; K from smem), folds S
// into the online softmax, converts P to 16 bits in registers and accumulates O += P V (RS-wgmma, P
// from registers, V read MN-major from smem: no transpose).
//
// Two schedules, chosen at run time (KernelOptions::intra_wg_overlap):
//  - overlapped (FlashAttention-3, Algorithm 2): S_{j+1} = Q K_{j+1}^T and O += P_j V_j are issued
//    back to back, so the tensor cores run while this warpgroup does the softmax of block j+1;
//  - sequential: S_j, softmax_j, O += P_j V_j, one after the other.
// Ping-pong (KernelOptions::pingpong): the two consumer warpgroups take turns to issue their GEMMs
// (named barriers), so one warpgroup's softmax runs while the other's GEMMs occupy the tensor cores.
// A variable-length kernel (Traits::kVarlen) masks each tile by its own sequence's lengths
// (sequence.cuh), zeroes the V rows past them before their P V (v_tail.cuh) and stores each tile
// through store_varlen_tile; at head dims 64 and 128 a tile may be GQA-packed (packed_gqa.cuh) and a
// split piece's O goes to the combine kernel (varlen_combine.cuh) instead of the tile.
#pragma once

#include "sm90/arch/convert.cuh"
#include "sm90/arch/mbarrier.cuh"
#include "sm90/arch/sync.cuh"
#include "sm90/arch/wgmma.cuh"
#include "sm90/fwd/combine_rows.cuh"
#include "sm90/fwd/epilogue.cuh"
#include "sm90/fwd/key_block_walk.cuh"
#include "sm90/fwd/mask.cuh"
#include "sm90/fwd/packed_gqa.cuh"
#include "sm90/fwd/params.hpp"
#include "sm90/fwd/producer.cuh"
#include "sm90/fwd/scheduler.cuh"
#include "sm90/fwd/softmax.cuh"
#include "sm90/fwd/split_merge.cuh"
#include "sm90/fwd/transposed_decode.cuh"
#include "sm90/fwd/v_tail.cuh"
#include "sm90/pipeline/stage_ring.cuh"
#include "sm90/pipeline/warpgroup_turns.cuh"
#include "sm90/tile/a_fragment.cuh"
#include "sm90/tile/smem_layout.hpp"

namespace hopattn::sm90 {

template <class Traits>
class Consumer {
  using QTile = typename Traits::QTile;
  using Turns =
      WarpgroupTurns<Traits::kPingPongBarrierBase, Traits::kPingPongBarrierThreads, Traits::kConsumerWarpgroups>;
  using KTile = typename Traits::KTile;
  using VTile = typename Traits::VTile;
  static constexpr int kS = Traits::kSRegisters;
  static constexpr int kO = Traits::kORegisters;
  static constexpr int kPSteps = Traits::kPSteps;
  static constexpr int kQSteps = Traits::kQInRegisters ? Traits::kQKSteps : 0;
  // Which K blocks need the mask: the tile's two bounds (masked_blocks.hpp), or the definition per
  // block where ptxas did better without the bounds (d 64 and 192 without chunks). The kernels that
  // take chunks use the bounds at every head dim: counting every block as masked there made a chunked
  // d 64 forward 77% slower than the same work unchunked (H100, perf-notes session 45).
  static constexpr bool kPerTileBounds = Traits::kLeanAddressing || Traits::kChunksAndSequsedQ;
  using QFragments = std::uint32_t[kQSteps > 0 ? kQSteps : 1][4];

 public:
  // drives_loads: without warp specialization, this thread also issues the TMA loads.
  __device__ Consumer(typename Traits::SharedStorage& s, const FwdParams& p, TensorMaps maps, int warpgroup,
                      bool drives_loads)
      : s_(s),
        p_(p),
        warpgroup_(warpgroup),
        thread_(threadIdx.x % Traits::kWarpgroupThreads),
        drives_loads_(drives_loads),
        tm_o_(maps.o),
        producer_(s, maps, p) {}

  __device__ void run() {
    // Ping-pong starts with warpgroup 0: warpgroup 1 opens its partner's first turn.
    Turns::open_first_turn(p_.pingpong, warpgroup_);
    const bool shared_o_stage = Traits::kOStageShared && p_.store_o_by_tma;
    if (shared_o_stage) grant_first_o_turn<Traits>(warpgroup_, thread_);
    std::uint32_t q_phase = 0;
    while (true) {
      if (inline_loads()) producer_.publish_next_visit(p_);
      mbarrier_wait(&s_.q_full, q_phase);  // producer -> us: visit published, its Q tile landed
      q_phase ^= 1;
      const int visit_id = read_visit(&s_.visit);
      if (visit_id == kNoVisitLeft) {
        if (thread_ == 0) tma_store_wait_all();  // O stores read shared memory until they finish
        if (shared_o_stage) retire_o_turns<Traits>(warpgroup_);
        return;
      }
      // The visit and what its masks see: FwdParams for a dense batch, its sequence's SequenceBounds
      // for a variable-length one. (The body stays in this loop: moved into a function it changed the
      // dense kernels' code.)
      [[maybe_unused]] VarlenVisit varlen;
      TileVisit visit;
      TileCoord c;
      if constexpr (Traits::kVarlen) {
        varlen = decode_varlen_visit<Traits::kBlockM, Traits::kBlockN, Traits::kVarlenSplit,
                                     Traits::kChunksAndSequsedQ, Traits::kKvByCpAsync>(p_, visit_id);
        visit = varlen.visit, c = varlen.coord;
      } else {
        visit = decode_visit<Traits::kBlockM, Traits::kBlockN, Traits::kChunksAndSequsedQ>(p_, visit_id);
        c = decode_tile(p_, visit.tile);
      }
      const auto& seq = sequence_bounds(varlen);
      const int n_begin = visit.n_begin, n_end = visit.n_end;
      const SplitPiece piece = SplitPiece::of(p_.split, visit);
      // m0: the tile's first query row (what block ranges and masked-block bounds take); row0: the
      // warpgroup's first row, a packed index in a packed GQA tile (packed_gqa.cuh).
      const int m0 = c.m_block * (Traits::kPacksGqa ? p_.tile_q_rows : Traits::kBlockM);
      const int row0 = (Traits::kPacksGqa ? c.m_block * p_.packed_rows : m0) + warpgroup_ * Traits::kRowsPerWarpgroup;
      const MaskedBlocks masked =
          masked_blocks<Traits::kBlockM, Traits::kBlockN, Traits::kChunksAndSequsedQ>(seq, p_.chunk_divisor, m0);

      // A variable-length tile's warpgroup without a live row computes nothing (mainloop_idle); a
      // decoding tile's first warpgroup computes transposed (mainloop_transposed).
      bool idle = false, transposed = false;
      if constexpr (Traits::kVarlen) {
        idle = !warpgroup_has_live_row(p_, c, seq.seqlen_q, warpgroup_ * Traits::kRowsPerWarpgroup);
      }
      if constexpr (Traits::kDecodingOnly) {
        transposed = warpgroup_ == 0;  // its launch takes only tiles of at most 8 live rows
      } else if constexpr (Traits::kTransposedDecode) {
        transposed = warpgroup_ == 0 && tile_live_rows(p_, c, seq.seqlen_q) <= TransposedDecode<Traits>::kRows;
      }

      float o[kO];
#pragma unroll
      for (int i = 0; i < kO; ++i) o[i] = 0.0f;
      OnlineSoftmax<kS> softmax(p_.scale_log2);
      QFragments q;
      if constexpr (Traits::kQInRegisters) {
        // Q is handed back after the first S GEMM (release_q_after_s_gemm)
        if (!idle && !transposed) {
          load_a_fragments<QTile>(smem_address(s_.q), warpgroup_ * Traits::kRowsPerWarpgroup, thread_, q);
        }
      }

      if (inline_loads()) producer_.begin_visit(p_, c, n_begin, n_end);
      if (n_end <= n_begin) {
        release(&s_.q_empty);  // no key visible: Q unused; rows store 0 / -inf
      } else if (idle) {
        mainloop_idle(seq, n_begin, n_end);
      } else if (transposed) {
        // Only the kernels that can take the branch instantiate the loop (its tiles need m64 key blocks).
        if constexpr (Traits::kTransposedDecode) mainloop_transposed(seq, masked, m0, row0, n_begin, n_end, o, softmax);
      } else if constexpr (!Traits::kDecodingOnly) {
        if (p_.intra_wg_overlap) {
          mainloop_overlapped(seq, masked, m0, row0, n_begin, n_end, q, o, softmax);
        } else {
          mainloop_sequential(seq, masked, m0, row0, n_begin, n_end, q, o, softmax);
        }
      }
      if constexpr (Traits::kVarlenSplit) {
        if (piece.split()) {  // the combine kernel stores the tile (varlen_combine.cuh)
          store_varlen_piece(piece, c, o, softmax);
          if (shared_o_stage) skip_o_turn<Traits>(warpgroup_, thread_);
          continue;
        }
      } else if (__builtin_expect(piece.split(), 0) && !finish_split(piece, o, softmax)) {
        // another piece stores the tile
        if (shared_o_stage) skip_o_turn<Traits>(warpgroup_, thread_);
        continue;
      }
      if constexpr (Traits::kVarlen) {
        store_varlen_tile(c, row0, shared_o_stage, o, softmax);
      } else {
        if constexpr (Traits::kOThroughSmem) {
          if (p_.store_o_by_tma) {
            store_output_through_smem<Traits>(p_, p_, s_, tm_o_, c, warpgroup_, row0, thread_, o, softmax);
            continue;
          }
        }
        store_output<Traits>(p_, p_, c, row0, thread_, o, softmax);
      }
    }
  }

 private:
  // What a tile's masks and K/V block range see (sequence.cuh).
  __device__ const auto& sequence_bounds(const VarlenVisit& varlen) const {
    if constexpr (Traits::kVarlen) return varlen.seq.bounds;
    else return p_;
  }

  // The epilogue of a variable-length tile. Its rows in out's coordinates: a packed out holds the
  // sequence from row q_row0, as batch entry 0 of its tensor map, whose end is only the last
  // sequence's end. So a warpgroup whose rows run past its own sequence stores through registers: by
  // TMA it would overwrite the next sequence's rows. The sequence is read again here rather than kept
  // in registers through the mainloop (that spilled at head dim 256).
  __device__ void store_varlen_tile(const TileCoord& c, int row0, bool shared_o_stage, float (&o)[kO],
                                    OnlineSoftmax<kS>& softmax) {
    const VarlenSequence sequence = varlen_sequence<Traits::kChunksAndSequsedQ>(p_, c.batch);
    if (Traits::kPacksGqa && p_.pack_gqa) {
      if (shared_o_stage) skip_o_turn<Traits>(warpgroup_, thread_);
      store_packed_output<Traits>(p_, sequence, c, warpgroup_ * Traits::kRowsPerWarpgroup, thread_, o, softmax);
      return;
    }
    const TileCoord out_c{c.m_block, c.head, sequence.rows.q_batch};
    const PackedRowEnd rows{sequence.rows.q_row0 + sequence.bounds.seqlen_q};
    const int out_row0 = sequence.rows.q_row0 + row0;
    if constexpr (Traits::kOThroughSmem) {
      if (p_.store_o_by_tma) {
        if (row0 + Traits::kRowsPerWarpgroup <= sequence.bounds.seqlen_q) {
          store_output_through_smem<Traits>(p_, rows, s_, tm_o_, out_c, warpgroup_, out_row0, thread_, o, softmax);
          return;
        }
        if (shared_o_stage) skip_o_turn<Traits>(warpgroup_, thread_);
      }
    }
    store_output<Traits>(p_, rows, out_c, out_row0, thread_, o, softmax);
  }

  __device__ bool inline_loads() const { return !Traits::kWarpSpecialized && drives_loads_; }

  // A split piece's end (split_merge.cuh); true when this warpgroup stores the tile. (scale_log2 is
  // passed although finish_split_piece could read it from p_: reading it there moved ptxas's
  // schedule, +0.6% cycles at d 128 16k, H200 2026-12-01.)
  __device__ bool finish_split(SplitPiece piece, float (&o)[kO], OnlineSoftmax<kS>& softmax) {
    return finish_split_piece<kO, Traits::kConsumerWarpgroups>(p_, piece, warpgroup_, thread_,
                                                              Traits::kEpilogueBarrierBase + warpgroup_, o,
                                                              softmax.row_max, softmax.row_sum, p_.scale_log2);
  }

  // A variable-length split piece's end: its O normalized and its LSE into its slot, for the threads
  // that hold a live row (rows past the sequence and a packed tile's idle rows are not combined). The
  // sequence's length is read again (an L1 hit) rather than kept through the mainloop, which spilled
  // at head dim 128. finish_rows comes first, on every thread: its row sums are quad shuffles over
  // the whole warp, and a thread that left early would be on its way to the next visit's aligned
  // wgmma while the others wait for it in the shuffle (the hang of perf-notes v62).
  __device__ void store_varlen_piece(SplitPiece piece, const TileCoord& c, const float (&o)[kO],
                                     const OnlineSoftmax<kS>& softmax) {
    float inv_sum[2];
    float lse[2];
    finish_rows(p_, softmax, inv_sum, lse);
    const int seqlen_q = varlen_sequence<Traits::kChunksAndSequsedQ>(p_, c.batch).bounds.seqlen_q;
    if (!thread_has_live_row(p_, c, seqlen_q, warpgroup_ * Traits::kRowsPerWarpgroup, thread_)) return;
    store_combine_partial<kO, Traits::kConsumerWarpgroups>(p_, piece.slot(), warpgroup_, thread_, o, inv_sum, lse);
  }

  // Our turn to issue GEMMs: wait until the other warpgroup has issued its own.
  __device__ void begin_gemm_turn() { Turns::begin(p_.pingpong, warpgroup_); }
  __device__ void end_gemm_turn() { Turns::end(p_.pingpong, warpgroup_); }

  // Each consumer warp releases a buffer once its reads are complete (empty barriers count 8 warps).
  __device__ void release(std::uint64_t* empty) { release_from_warp(empty, thread_); }

  // Waits until a K or V stage has landed. Stages filled by cp.async (kv_cp_async.cuh) were written
  // through the generic proxy; the fence orders them before our wgmma, which reads through the async
  // proxy.
  __device__ void wait_landed(std::uint64_t* full, std::uint32_t phase) {
    mbarrier_wait(full, phase);
    if constexpr (Traits::kKvByCpAsync) fence_proxy_async_shared();
  }

  // A V stage was just released: an inline producer refills the ring.
  __device__ void release_v(int stage) {
    release(&s_.v_empty[stage]);
    if (inline_loads()) producer_.load_next();
  }

  // A variable-length tile's last K/V block may hold rows past its sequence's keys (v_tail.cuh): once
  // the block's V has landed, this warpgroup zeroes its share of them (nothing in the dense kernels).
  template <class Bounds>
  __device__ void clear_v_tail(const Bounds& seq, int n_end, int stage, std::uint32_t phase) {
    if constexpr (Traits::kVarlen) {
      if constexpr (Traits::kKvByCpAsync) return;  // the copies zero-filled those rows
      const int first_row = first_row_past_keys<Traits::kBlockN>(seq.seqlen_k, n_end);
      if (first_row == Traits::kBlockN) return;
      mbarrier_wait(&s_.v_full[stage], phase);  // producer (TMA) -> us: V block landed
      clear_v_rows<Traits>(s_, stage, first_row, warpgroup_, thread_);
    }
  }

  // ... and waits until every consumer warp has, before the block's P V.
  template <class Bounds>
  __device__ void wait_v_tail_cleared(const Bounds& seq, int n_end) {
    if constexpr (Traits::kVarlen) {
      if constexpr (Traits::kKvByCpAsync) return;
      if (first_row_past_keys<Traits::kBlockN>(seq.seqlen_k, n_end) == Traits::kBlockN) return;
      mbarrier_wait(&s_.v_tail_cleared, v_tail_phase_);
      v_tail_phase_ ^= 1;
    }
  }

  // S = Q K^T over the head dim: kHeadDim/16 wgmmas, committed as one group (not waited for).
  __device__ void issue_qk(float (&s)[kS], const QFragments& q, int stage) {
    const std::uint32_t q_base = smem_address(s_.q) + warpgroup_ * Traits::kRowsPerWarpgroup * kSwizzleBytes;
    const std::uint32_t k_base = smem_address(s_.k[stage]);
    const std::uint64_t q_desc = kmajor_descriptor(q_base), k_desc = kmajor_descriptor(k_base);
    constexpr bool kAdvance = Traits::kLeanAddressing;
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < Traits::kQKSteps; ++step) {
      // 16 columns = 32 bytes; four steps per 128-byte column block.
      const int block = step / 4;
      const std::uint32_t in_row = (step % 4) * 32;
      const std::uint64_t desc_k =
          kmajor_descriptor_at<kAdvance>(k_desc, k_base, block * KTile::kColumnBlockBytes + in_row);
      if constexpr (Traits::kQInRegisters) {
        wgmma_rs<Traits::kBlockN, Traits::kIsBf16, /*kBKMajor=*/true>(s, q[step], desc_k, step > 0);
      } else {
        const std::uint64_t desc_q =
            kmajor_descriptor_at<kAdvance>(q_desc, q_base, block * QTile::kColumnBlockBytes + in_row);
        wgmma_ss<Traits::kBlockN, Traits::kIsBf16>(s, desc_q, desc_k, step > 0);
      }
    }
    wgmma_commit();
  }

  // O += P V over the keys of the block: kBlockN/16 wgmmas, committed as one group.
  __device__ void issue_pv(float (&o)[kO], const std::uint32_t (&p)[kPSteps][4], int stage) {
    const std::uint32_t v_base = smem_address(s_.v[stage]);
    const std::uint64_t v_desc = mnmajor_descriptor(v_base, VTile::kColumnBlockBytes);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kPSteps; ++step) {
      // 16 keys = 16 rows of 128 bytes down every column block.
      const std::uint64_t desc_v = mnmajor_descriptor_at<Traits::kLeanAddressing>(
          v_desc, v_base, step * 16 * kSwizzleBytes, VTile::kColumnBlockBytes);
      wgmma_rs<Traits::kHeadDimV, Traits::kIsBf16>(o, p[step], desc_v, 1);
    }
    wgmma_commit();
  }

  // Raw scores -> what the softmax sees: softcap (when on), then the mask.
  template <class Bounds>
  __device__ void prepare_scores(const Bounds& seq, float (&s)[kS], const MaskedBlocks& masked, int m0, int row0,
                                 int n_block) {
    if (p_.softcap > 0.0f) {
#pragma unroll
      for (int i = 0; i < kS; ++i) s[i] = p_.softcap * fast_tanh(s[i] * p_.softcap_input_scale);
    }
    const int n0 = n_block * Traits::kBlockN;
    if (block_needs_mask<Traits::kBlockM, Traits::kBlockN, kPerTileBounds>(masked, seq, m0, n_block)) {
      if (Traits::kPacksGqa && p_.pack_gqa)
        apply_mask_packed<Traits::kChunksAndSequsedQ>(s, thread_, row0, n0, seq, p_);
      else
        apply_mask<Traits::kChunksAndSequsedQ>(s, thread_, row0, n0, seq, p_.chunk_divisor);
    }
  }

  template <class Bounds>
  __device__ void mainloop_sequential(const Bounds& seq, const MaskedBlocks& masked, int m0, int row0, int n_begin,
                                      int n_end, const QFragments& q, float (&o)[kO], OnlineSoftmax<kS>& softmax) {
    float s[kS];
    std::uint32_t p[kPSteps][4];
    clear_v_tail(seq, n_end, ring_.index(), ring_.phase());
    wait_v_tail_cleared(seq, n_end);
    KeyBlockWalk<Traits> blocks;
    for (int n = n_end - 1; blocks.more(n, n_begin); --n) {
      const int stage = ring_.index();
      wait_landed(&s_.k_full[stage], ring_.phase());  // producer -> us: K block landed
      n = blocks.at(s_, stage, n);
      begin_gemm_turn();
      issue_qk(s, q, stage);
      end_gemm_turn();
      wgmma_wait<0>();
      pin_registers(s);
      release(&s_.k_empty[stage]);  // S GEMM done reading K
      release_q_after_s_gemm<Traits::kQInRegisters>(&s_.q_empty, thread_, n == n_end - 1, blocks.is_last(n, n_begin));
      prepare_scores(seq, s, masked, m0, row0, n);
      float factor[2];
      softmax.update(s, factor);
      rescale_rows(o, factor);
      pack_probabilities<Traits::kIsBf16>(s, p);
      wait_landed(&s_.v_full[stage], ring_.phase());  // producer -> us: V block landed
      issue_pv(o, p, stage);
      wgmma_wait<0>();
      pin_registers(o);
      release_v(stage);  // PV GEMM done reading V
      ring_.advance();
    }
  }

  // The P V GEMM of the last turn is done: O, p and its V stage are free.
  __device__ void wait_for_pv(float (&o)[kO], std::uint32_t (&p)[kPSteps][4], int pv_stage) {
    wgmma_wait<0>();
    pin_registers(o);
    pin_registers(p);
    release_v(pv_stage);
  }

  template <class Bounds>
  __device__ void mainloop_overlapped(const Bounds& seq, const MaskedBlocks& masked, int m0, int row0, int n_begin,
                                      int n_end, const QFragments& q, float (&o)[kO], OnlineSoftmax<kS>& softmax) {
    float s[kS];
    std::uint32_t p[kPSteps][4];
    float factor[2];
    // The first block: S and softmax alone; its P V is issued together with the next block's S.
    KeyBlockWalk<Traits> blocks;
    int n = n_end - 1;
    int pv_stage = ring_.index();
    wait_landed(&s_.k_full[pv_stage], ring_.phase());  // producer -> us: K block landed
    n = blocks.at(s_, pv_stage, n);
    begin_gemm_turn();
    issue_qk(s, q, pv_stage);
    end_gemm_turn();
    clear_v_tail(seq, n_end, pv_stage, ring_.phase());  // while S runs
    wgmma_wait<0>();
    pin_registers(s);
    release(&s_.k_empty[pv_stage]);
    release_q_after_s_gemm<Traits::kQInRegisters>(&s_.q_empty, thread_, true, blocks.is_last(n, n_begin));
    prepare_scores(seq, s, masked, m0, row0, n);
    softmax.update(s, factor);
    pack_probabilities<Traits::kIsBf16>(s, p);
    std::uint32_t pv_phase = ring_.phase();
    ring_.advance();
    // Before the turn that issues this block's P V: the other warpgroups clear their shares right after
    // their first S GEMM issue, which waits for no turn of ours but the one just ended (no cycle).
    wait_v_tail_cleared(seq, n_end);

    for (n = n_end - 2; blocks.more(n, n_begin); --n) {
      const int stage = ring_.index();
      wait_landed(&s_.k_full[stage], ring_.phase());  // producer -> us: K block n landed
      n = blocks.at(s_, stage, n);
      begin_gemm_turn();
      issue_qk(s, q, stage);  // S_n, in flight during the softmax below
      rescale_rows(o, factor);  // O was last written by the P V waited for in the previous iteration
      wait_landed(&s_.v_full[pv_stage], pv_phase);  // producer -> us: V block n+1 landed
      issue_pv(o, p, pv_stage);  // O += P_{n+1} V_{n+1}
      end_gemm_turn();
      wgmma_wait<1>();  // S_n done, P V may still run
      pin_registers(s);
      release(&s_.k_empty[stage]);
      release_q_after_s_gemm<Traits::kQInRegisters>(&s_.q_empty, thread_, false, blocks.is_last(n, n_begin));
      prepare_scores(seq, s, masked, m0, row0, n);
      if constexpr (Traits::kPvWaitAfterMax) {
        // The P V wait between the max and the exponentials, kept there (keep_next_wait_after);
        // ptxas otherwise puts it before the max reduction.
        softmax.update_max(s, factor);
        keep_next_wait_after(factor[0] + factor[1], &s_.pv_fence[warpgroup_ * Traits::kWarpgroupThreads + thread_]);
        wait_for_pv(o, p, pv_stage);
        softmax.exponentiate(s, factor);
      } else {
        softmax.update(s, factor);
        wait_for_pv(o, p, pv_stage);
      }
      pack_probabilities<Traits::kIsBf16>(s, p);
      pv_stage = stage;
      pv_phase = ring_.phase();
      ring_.advance();
    }
    rescale_rows(o, factor);
    wait_landed(&s_.v_full[pv_stage], pv_phase);
    issue_pv(o, p, pv_stage);
    wgmma_wait<0>();
    pin_registers(o);
    release_v(pv_stage);
  }

  // The V tail of a loop whose live warpgroup clears it before its first GEMM turn (without
  // intra-warpgroup overlap): this warpgroup's share cleared, then every consumer's waited for.
  template <class Bounds>
  __device__ void clear_v_tail_before_turns(const Bounds& seq, int n_end) {
    clear_v_tail(seq, n_end, ring_.index(), ring_.phase());
    wait_v_tail_cleared(seq, n_end);
  }

  // The mainloop of a warpgroup none of whose rows is live (a decoding tile's second warpgroup, the
  // rows past a short sequence): no GEMMs and no softmax, only the barrier traffic of a mainloop, in its
  // order, so the other warpgroup and the producer see what they would: one GEMM turn per block, this
  // warpgroup's share of a V tail cleared, and its K, Q and V releases, each after the block has landed
  // (so that it counts in the stage's current phase, with or without turns). Its O stays 0 and its rows
  // store nothing. The V tail is cleared where the live warpgroup's mainloop clears it:
  // mainloop_sequential before its first turn, mainloop_overlapped after it (the other order deadlocks
  // against the live warpgroup's wait for the clear, H200 2026-12-02).
  template <class Bounds>
  __device__ void mainloop_idle(const Bounds& seq, int n_begin, int n_end) {
    const bool overlapped = p_.intra_wg_overlap;
    if (!overlapped) clear_v_tail_before_turns(seq, n_end);
    KeyBlockWalk<Traits> blocks;
    for (int n = n_end - 1; blocks.more(n, n_begin); --n) {
      const int stage = ring_.index();
      const std::uint32_t phase = ring_.phase();
      mbarrier_wait(&s_.k_full[stage], phase);
      n = blocks.at(s_, stage, n);
      begin_gemm_turn();
      end_gemm_turn();
      if (overlapped && n == n_end - 1) clear_v_tail(seq, n_end, stage, phase);
      release(&s_.k_empty[stage]);
      release_q_after_s_gemm<Traits::kQInRegisters>(&s_.q_empty, thread_, n == n_end - 1, blocks.is_last(n, n_begin));
      if (overlapped && n == n_end - 1) wait_v_tail_cleared(seq, n_end);
      mbarrier_wait(&s_.v_full[stage], phase);
      release_v(stage);
      ring_.advance();
    }
  }

  // A decoding tile's first warpgroup (transposed_decode.cuh), while the second runs mainloop_idle:
  // the same barrier traffic in the same order (one GEMM turn per block, the V tail cleared where
  // mainloop_idle clears it), and Q released at the end, since its dead rows hold the scratch.
  template <class Bounds>
  __device__ void mainloop_transposed(const Bounds& seq, const MaskedBlocks& masked, int m0, int row0, int n_begin,
                                      int n_end, float (&o)[kO], OnlineSoftmax<kS>& softmax) {
    // Warpgroup 0's epilogue barrier: idle until the tile's epilogue.
    TransposedDecode<Traits> decode(smem_address(s_.q), thread_, Traits::kEpilogueBarrierBase, p_.scale_log2);
    const bool overlapped = p_.intra_wg_overlap;
    if (!overlapped) clear_v_tail_before_turns(seq, n_end);
    KeyBlockWalk<Traits> blocks;
    for (int n = n_end - 1; blocks.more(n, n_begin); --n) {
      const int stage = ring_.index();
      const std::uint32_t phase = ring_.phase();
      wait_landed(&s_.k_full[stage], phase);  // producer -> us: K block n landed
      n = blocks.at(s_, stage, n);
      begin_gemm_turn();
      decode.issue_scores(smem_address(s_.k[stage]));
      end_gemm_turn();
      if (overlapped && n == n_end - 1) clear_v_tail(seq, n_end, stage, phase);
      wgmma_wait<0>();
      decode.pin_scores();
      release(&s_.k_empty[stage]);
      if (overlapped && n == n_end - 1) wait_v_tail_cleared(seq, n_end);
      if (p_.softcap > 0.0f) decode.apply_softcap(p_.softcap, p_.softcap_input_scale);
      if (block_needs_mask<Traits::kBlockM, Traits::kBlockN, kPerTileBounds>(masked, seq, m0, n)) {
        decode.template apply_mask<Traits::kChunksAndSequsedQ>(seq, p_, Traits::kPacksGqa && p_.pack_gqa, row0,
                                                               n * Traits::kBlockN);
      }
      decode.update_and_store_probabilities();
      wait_landed(&s_.v_full[stage], phase);  // producer -> us: V block n landed
      decode.issue_output(smem_address(s_.v[stage]));
      wgmma_wait<0>();
      decode.pin_output();
      release_v(stage);
      ring_.advance();
    }
    decode.finish(o, softmax.row_max, softmax.row_sum);
    release_ldmatrix_reads_to_tma(&s_.q_empty, thread_);
  }

  typename Traits::SharedStorage& s_;
  const FwdParams& p_;
  const int warpgroup_;
  const int thread_;
  const bool drives_loads_;
  const CUtensorMap* tm_o_;
  InlineProducer<Traits> producer_;
  StageRing<Traits::kStages> ring_;
  std::uint32_t v_tail_phase_ = 0;  // parity of SharedStorage::v_tail_cleared's next phase (kVarlen)
};

}  // namespace hopattn::sm90
