#!/usr/bin/env bash
# One device call for the prepared patches (made for a session where machines were scarce): main's
# whole C++ GPU suite; v140's qv tests and v141's backward tests; v140 against main on mla_decode and
# v141 against main on mla_bwd (A/B/A/B, bench/ab.sh); racecheck and synccheck on v140's qv corner
# cases; main's Python GPU suite (FlashMLA's interface included). Most important first, so a call cut
# short still returns what matters most. Estimated at 5-6 minutes (session 48's timings); the results
# are in $OUT/summary.txt.
#
#   bash docs/patches/device_call.sh CARRY_DIR      # CARRY_DIR from docs/patches/prepare_carry.sh
set -uo pipefail
C="$(cd "$1" && pwd)"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
for f in "$C"/*.xz; do n=$(basename "$f" .xz); (xz -T8 -dc "$f" > /tmp/$n && chmod +x /tmp/$n) & done; wait
S=$OUT/summary.txt
nvidia-smi -L | tee $OUT/device.txt; date >> $S
timeout 120 /tmp/tests_main > /tmp/gpu_suite.log 2>&1; echo "gpu suite (main) rc=$?" | tee -a $S
grep -E "^\[  PASSED|^\[  FAILED|tests ran" /tmp/gpu_suite.log | head -20 | tee -a $S
timeout 60 /tmp/tests_v140-mla-seesaw --gtest_filter='Qv*' > /tmp/qv_v140.log 2>&1; echo "qv suite (v140) rc=$?" | tee -a $S
grep -E "^\[  PASSED|^\[  FAILED|Failure|tests ran" /tmp/qv_v140.log | head -20 | tee -a $S
grep -vE "^\[ +(RUN|OK) " /tmp/qv_v140.log | head -100 > $OUT/qv_v140.log
timeout 90 /tmp/tests_v141-bwd-p-exchange-f16 --gtest_filter='*Backward*:*Bwd*' > /tmp/bwd.log 2>&1; echo "v141 backward tests rc=$?" | tee -a $S
grep -E "^\[  PASSED|^\[  FAILED|Failure|tests ran" /tmp/bwd.log | head -20 | tee -a $S
echo "==== main vs v140" | tee -a $S
AB_DIR=/tmp/ab140 OUT= timeout 120 bench/ab.sh /tmp/bench_main /tmp/bench_v140-mla-seesaw --grid mla_decode -- --no-lse 2>&1 | tee -a $S
cat /tmp/ab140/mla_decode_a_1.txt /tmp/ab140/mla_decode_b_1.txt >> $S
echo "==== main vs v141" | tee -a $S
AB_DIR=/tmp/ab141 OUT= timeout 150 bench/ab.sh /tmp/bench_main /tmp/bench_v141-bwd-p-exchange-f16 --grid mla_bwd 2>&1 | tee -a $S
cat /tmp/ab141/mla_bwd_a_1.txt /tmp/ab141/mla_bwd_b_1.txt >> $S
# The Python extension builds beside the sanitizers (the CPU is idle under them, and no timing runs).
cp -r "$C/inst" /tmp/inst && xz -d /tmp/inst/lib/libhopattn.a.xz
(python/device_build.sh /tmp/inst /tmp/pyb > /tmp/pyb.txt 2> $OUT/pybuild.log) &
pybuild=$!
F='QvForward.OddSizes:QvForward.CausalRowsWithoutKeys:QvForward.PagedCache'
for tool in racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool /tmp/tests_v140-mla-seesaw --gtest_filter=$F > /tmp/$tool.log 2>&1; echo "v140 $tool rc=$?" | tee -a $S
  tail -3 /tmp/$tool.log | tee -a $S; head -30 /tmp/$tool.log >> $OUT/sanitizers.log
done
wait $pybuild; PY=$(tail -1 /tmp/pyb.txt | cut -d= -f2); echo "PYTHONPATH=$PY" | tee -a $S
PYTHONPATH=$PY timeout 120 python3 -m pytest python/tests -q -p no:cacheprovider -k gpu > /tmp/pytest.log 2>&1; echo "pytest rc=$?" | tee -a $S
grep -E "FAILED|ERROR|passed|failed" /tmp/pytest.log | tail -20 | tee -a $S
tail -60 /tmp/pytest.log > $OUT/pytest_tail.log; date >> $S
