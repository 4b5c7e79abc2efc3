#!/usr/bin/env bash
# Runs the GPU test suite on a Hopper machine, the CUDA graph tests each in a process of its own,
# then compute-sanitizer (memcheck, racecheck, synccheck) on the small SanitizerSmall.* shapes. Run
# from the repo root with the build folder present:
#   scripts/device_tests.sh [build-dir]        (default: build)
# Results go to $OUT (default ./device-test-results): gpu_tests.xml and .log, sanitizer_<tool>.log,
# device.txt. A short summary is printed last; the exit status is non-zero if anything failed.
set -u -o pipefail

BUILD_DIR="${1:-build}"
OUT="${OUT:-$PWD/device-test-results}"
mkdir -p "$OUT"
TESTS="$BUILD_DIR/tests/hopattn_gpu_tests"
# The small bf16/fp16 shapes (parameterized: Shapes/SanitizerSmall.PassesUnderSanitizer/...), the FP8
# kernel's corner cases (its V transposers write shared memory that wgmma reads), its keys-contiguous
# v cases (V^T by TMA, permuted K rows), the FP8 arch tests, the variable-length batches cut after
# each sequence (a tile's rows past its sequence must not be stored), paged caches of small and large
# pages (K/V blocks loaded in page chunks; pages of one key copied a page id a row), NaN in the rows past a
# sequence's keys (the consumers zero
# those V rows in shared memory before wgmma reads them), the backward's small shapes (dense,
# variable-length with NaN past seqused_k, deterministic), and decoding steps with GQA packing and the
# variable-length split (packed Q tiles by a 5D TMA box, split partials merged across CTAs), and d 64
# decoding tiles computed transposed (P^T and the column exchanges in the Q stage's dead rows; at d 256
# the decoding kernels, every tile transposed, packed and split: perf-notes v149-v150), and the
# MLA (qv) kernel's odd sizes, rows without keys and paged caches (P handed between its warpgroups
# through shared memory, V rows zeroed past the keys, named barriers between two roles; its narrow
# tiles' merge, where racecheck needs both warpgroups to pass equal numbers of their own barriers:
# perf-notes v148).
SANITIZER_FILTER='*SanitizerSmall.*:Fp8Forward.CornerCases:Fp8Forward.TransposedDecodeSmall:Fp8Forward.KeysContiguousVMatchesTheOracle:ArchFp8Wgmma.*:ForwardVarlen.NoSequenceWritesPastItsEnd:*ForwardPagedCorners*/KeyEdges_p16_d128_bfloat16:*ForwardPagedCorners*/KeyEdges_causal_p32_d128_bfloat16:*ForwardPagedCorners*/KeyEdges_p256_d128_bfloat16:*ForwardPagedCorners*/Decode_p16_d64_bfloat16:SanitizerSmall/BackwardMatchesReference.*:SanitizerSmall/BackwardVarlenCorners.*:SanitizerSmall/BackwardDeterministic.*:*ForwardPagedNonFiniteTail*/Nan_p16_d128_bfloat16:*ForwardPagedNonFiniteTail*/Nan_causal_p256_d256_bfloat16:*ForwardVarlenNonFiniteTail*/Nan_d64_float16_VarlenK:Decode/ForwardPagedNonFiniteTail.*/Packed_splits4_p16_d128*:DecodeRowPages/ForwardPagedNonFiniteTail.*/Packed_splits4_p1_d64*:CornersRowPages/ForwardPagedCorners.*/KeyEdges_causal_p2_d128_bfloat16_RowPages:Decode/ForwardVarlenCorners.*/Hq28Hkv4_d128_splits5*:TransposedDecode/ForwardVarlenCorners.*/Ratio4Drafts_d64_splits3*:TransposedDecodeKvCopies/ForwardVarlenCorners.*/Mha_d64_splits0*:WideDecode/ForwardVarlenCorners.*/Ratio2Drafts_d256_splits3*:Decode/ForwardPagedNonFiniteTail.*/Packed_splits4_p16_d256*:QvForward.OddSizes:QvForward.CausalRowsWithoutKeys:QvForward.PagedCache'

if [[ ! -x "$TESTS" ]]; then
  echo "device_tests.sh: $TESTS not found; build with -DHOPATTN_SM90=ON first" >&2
  exit 2
fi

SANITIZER="$(command -v compute-sanitizer || true)"
for candidate in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -z "$SANITIZER" && -x "$candidate" ]] && SANITIZER="$candidate"
done

{ nvidia-smi -L && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } >"$OUT/device.txt" 2>/dev/null || echo "nvidia-smi not available" >"$OUT/device.txt"

# 1. The whole GPU suite, with a JUnit-style XML report.
start=$SECONDS
"$TESTS" --gtest_output="xml:$OUT/gpu_tests.xml" 2>&1 | tee "$OUT/gpu_tests.log"
tests_rc=$?
tests_seconds=$((SECONDS - start))

# 2. The CUDA graph tests alone, one process each: their first capture is then the process's first
# forward call, which sets up the per-device tile counters and workspace pool under capture.
declare -A first_capture_rc
for suite in ForwardTailSplit Fp8Forward; do
  "$TESTS" --gtest_filter="$suite.CudaGraphReplayMatchesTheDirectCall" >"$OUT/first_capture_$suite.log" 2>&1
  first_capture_rc[$suite]=$?
done

# 3. compute-sanitizer on the small shapes; each tool's log ends with its ERROR SUMMARY.
declare -A sanitizer_rc
for tool in memcheck racecheck synccheck; do
  if [[ -z "$SANITIZER" ]]; then
    echo "compute-sanitizer not found" >"$OUT/sanitizer_$tool.log"
    sanitizer_rc[$tool]=127
    continue
  fi
  extra=()
  [[ $tool == memcheck ]] && extra=(--leak-check full)
  "$SANITIZER" --tool "$tool" "${extra[@]}" --error-exitcode 99 \
    "$TESTS" --gtest_filter="$SANITIZER_FILTER" >"$OUT/sanitizer_$tool.log" 2>&1
  sanitizer_rc[$tool]=$?
done

# 4. Summary.
echo
echo "==== device test summary ($(head -n 1 "$OUT/device.txt")) ===="
counts="$(grep -m1 -o '<testsuites [^>]*' "$OUT/gpu_tests.xml" 2>/dev/null |
  grep -o '\(tests\|failures\|disabled\|errors\)="[0-9]*"' | tr '\n' ' ')"
skipped="$(grep -c 'result="skipped"' "$OUT/gpu_tests.xml" 2>/dev/null)" || true
echo "gpu tests: exit $tests_rc, ${counts:-no xml report} skipped=\"${skipped:-0}\" (${tests_seconds}s)"
grep -E '^\[ (seed|sweep|options) ' "$OUT/gpu_tests.log" | sed 's/^/  /'
grep -E '^\[  FAILED  \]' "$OUT/gpu_tests.log" | sort -u | head -n 20 | sed 's/^/  /'
status=$tests_rc
for suite in ForwardTailSplit Fp8Forward; do
  rc=${first_capture_rc[$suite]}
  echo "first call under graph capture ($suite): exit $rc$(grep -m1 -o 'PASSED.*\|FAILED.*' "$OUT/first_capture_$suite.log" | sed 's/^/, /')"
  [[ $rc -ne 0 ]] && status=1
done
for tool in memcheck racecheck synccheck; do
  rc=${sanitizer_rc[$tool]}
  # memcheck and synccheck end with an ERROR SUMMARY line, racecheck with a RACECHECK SUMMARY one.
  summary="$(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' "$OUT/sanitizer_$tool.log" 2>/dev/null | sed 's/^========= //')"
  echo "sanitizer $tool: exit $rc, ${summary:-no summary (see sanitizer_$tool.log)}"
  [[ $rc -ne 0 ]] && status=1
done
echo "logs: $OUT"
exit "$status"
