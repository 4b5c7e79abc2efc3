#!/usr/bin/env python3
"""Shows that the SASS check can fail: run on tests/sass/negative_fixture.cu's object, it must exit 1
and name, for each kernel, the missing tensor-core GEMM (HGMMA, or QGMMA for the FP8-named one), the
missing TMA load, and the local memory, for the variable-length ones (16-bit and FP8, d 64) the
missing m64n8 GEMMs, and for the backward-named one its exponentials behind branches.

  check_rejects_fixture.py FIXTURE_OBJECT [check_forward_sass.py options...]
"""

import os
import re
import subprocess
import sys

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_forward_sass.py")
# Each kernel's FAIL line, then its counts line ending in the reasons.
EXPECTED = (
    r"FAIL .*Bf16Tag.*\n.*<- missing HGMMA, UTMALDG; local memory \(LDL [1-9]",
    r"FAIL .*Fp8E4M3Tag.*\n.*<- missing QGMMA, UTMALDG; local memory \(LDL [1-9]",
    r"FAIL .*FwdTraits<64, .*Bf16Tag.*\n.*<- missing HGMMA, UTMALDG; local memory \(LDL [1-9].*"
    r"missing HGMMA\.64x8x16 \(the transposed decoding loop\)",
    r"FAIL .*Fp8FwdTraits<64, .*\n.*<- missing QGMMA, UTMALDG; local memory \(LDL [1-9].*"
    r"missing QGMMA\.64x8x32 \(the transposed decoding loop\)",
    r"FAIL .*attention_backward_kernel<.*Bf16Tag.*\n.*<- missing HGMMA, UTMALDG; exponentials behind branches "
    r"\(\d+ MUFU\.EX2 pairs",
    r"FAILED: 5 problem\(s\)",
)


def main():
    result = subprocess.run([sys.executable, CHECKER, *sys.argv[2:], sys.argv[1]], capture_output=True, text=True)
    print(result.stdout + result.stderr)
    absent = [pattern for pattern in EXPECTED if not re.search(pattern, result.stdout)]
    if result.returncode != 1 or absent:
        print(f"the check did not reject the fixture as expected: exit {result.returncode} (want 1), "
              f"missing output {absent}")
        return 1
    print("the check rejects the fixture: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
