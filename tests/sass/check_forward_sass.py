#!/usr/bin/env python3
"""Checks the SASS of every attention-kernel instantiation (forward, FP8 forward, backward) in built
objects or archives.

  check_forward_sass.py [--cuda-bin-dir DIR] [--tools-dir DIR] FILE...   check; exit 0 pass, 1 fail
  check_forward_sass.py --tools-dir DIR --install-only                   make cuobjdump available

Every function whose name contains `attention_forward_kernel`, `attention_forward_fp8_kernel` or
`attention_backward_kernel` must issue its GEMMs on the Hopper tensor
cores (HGMMA; QGMMA for FP8 instantiations, named with fp8/e4m3), load through TMA (UTMALDG), and use
no local memory (LDL/STL), and keep its exponentials out from behind branches: at most
MAX_BRANCHED_EXPONENTIALS pairs of MUFU.EX2 within EXPONENTIAL_PAIR_SPAN instructions of each other with a
BRA or BSSY between them (a per-element branch in an exponential loop, as the backward had until
perf-notes v94/v96, cost it 8-18%). The kernels whose decoding tiles run transposed must also issue m64n8 GEMMs:
the variable-length ones at head dim 64, HGMMA.64x8x16 in the 16-bit ones (src/sm90/fwd/transposed_decode.cuh)
and QGMMA.64x8x32 in the FP8 ones (src/sm90/fwd_fp8/transposed_decode.cuh). A file
without any forward kernel fails too, so a build that silently lost its kernels cannot pass. Exit 2:
cuobjdump/nvdisasm not found.

cuobjdump --dump-sass needs nvdisasm beside it. Both ship with the full CUDA toolkit; where the toolkit
is trimmed to the compiler (as on the CI machines), --install-only puts NVIDIA's PyPI builds of the
two into --tools-dir, where the check then looks.
"""

import argparse
import collections
import functools
import glob
import os
import re
import shutil
import subprocess
import sys

# The 16-bit kernel (attention_forward_kernel) and the FP8 one (attention_forward_fp8_kernel); the
# backward (attention_backward_kernel) is checked alike where present.
FORWARD_KERNEL = re.compile(r"attention_forward(?:_fp8)?_kernel")
ATTENTION_KERNEL = re.compile(r"attention_(?:forward(?:_fp8)?|backward)_kernel")
# The kernels whose decoding tiles run transposed (kTransposedDecode), with the m64n8 GEMM each must hold:
# FwdTraits<64, element, keys, stages, warp-specialized, 2 consumer warpgroups, variable-length, ...> and
# Fp8FwdTraits<64, block descales, softcap, keys, V^T from global (0), variable-length (1)>.
TRANSPOSED_DECODE_KERNELS = (
    (re.compile(r"(?<!Fp8)FwdTraitsILi64E.+?ELi\d+ELi\d+ELb1ELi2ELb1E"), "HGMMA.64x8x16"),
    (re.compile(r"Fp8FwdTraitsILi64ELb[01]ELb[01]ELi\d+ELb0ELb1E"), "QGMMA.64x8x32"),
)
# Exponentials behind branches: pairs of MUFU.EX2 at most this many instructions apart with a BRA or
# BSSY between them. The kernels' unrolled exponential loops have none; loop ends and the odd masked
# path leave up to 2 a kernel (2026-12-03) and up to 4 by session 58, and the d 64 copy kernels 5 since
# v156 (from 3), whose V stage's wait (a try_wait branched out of line to its retry loop) ptxas schedules
# among the transposed tile's exponentials (2026-12-06, perf-notes session 59); the backward before v94
# had 47 in its d 64 kernel.
EXPONENTIAL_PAIR_SPAN = 24
MAX_BRANCHED_EXPONENTIALS = 6
# Any 13.x disassembler reads the sm_90a cubins nvcc 13.0 writes; pinned so CI runs are repeatable.
PYPI_TOOLS = ("nvidia-cuda-cuobjdump==13.2.51", "nvidia-cuda-nvdisasm==13.2.51")

# A SASS instruction line: "/*0a40*/   @!P0 HGMMA.64x128x16.F32.BF16 gdesc[UR4], ... ;" (group 1: the
# whole mnemonic, group 2: the base opcode HGMMA).
INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?(([A-Z][A-Z0-9_]*)[A-Za-z0-9_.]*)")
FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
# Lines that end the current function's listing (next archive member or next embedded cubin).
SECTION_END = re.compile(r"^(member |Fatbin |\s*code for )")


def tool_dirs(cuda_bin_dir, tools_dir):
    dirs = []
    if cuda_bin_dir:
        dirs.append(cuda_bin_dir)
    dirs += os.environ.get("PATH", "").split(os.pathsep)
    if tools_dir:
        dirs += sorted(glob.glob(os.path.join(tools_dir, "nvidia", "*", "bin")))
    return [d for d in dirs if d]


def find_tools(cuda_bin_dir, tools_dir):
    """(cuobjdump, nvdisasm dir), or None when either is missing."""
    dirs = tool_dirs(cuda_bin_dir, tools_dir)
    cuobjdump = next((shutil.which("cuobjdump", path=d) for d in dirs if shutil.which("cuobjdump", path=d)), None)
    nvdisasm = next((shutil.which("nvdisasm", path=d) for d in dirs if shutil.which("nvdisasm", path=d)), None)
    if cuobjdump is None or nvdisasm is None:
        return None
    return cuobjdump, os.path.dirname(nvdisasm)


def install_tools(tools_dir):
    print(f"cuobjdump/nvdisasm not in the CUDA toolkit or on PATH: installing {' '.join(PYPI_TOOLS)} into {tools_dir}")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-deps", "--upgrade", "--target", tools_dir, *PYPI_TOOLS], check=True)
    for binary in glob.glob(os.path.join(tools_dir, "nvidia", "*", "bin", "*")):
        os.chmod(binary, 0o755)  # wheels do not always keep the execute bit


def dump_sass(cuobjdump, nvdisasm_dir, path):
    env = dict(os.environ, PATH=nvdisasm_dir + os.pathsep + os.environ.get("PATH", ""))
    result = subprocess.run([cuobjdump, "--dump-sass", path], env=env, capture_output=True, text=True)
    # cuobjdump exits non-zero for a file with no device code at all; that is a finding, not an error.
    if result.returncode != 0 and "does not contain device code" not in result.stderr:
        sys.exit(f"error: {cuobjdump} --dump-sass {path} failed:\n{result.stderr}")
    return result.stdout


class KernelSass:
    """One function's instructions: counts of base opcodes (HGMMA.64x128x16.F32 -> HGMMA) and the full
    mnemonics in program order."""

    def __init__(self):
        self.opcodes = collections.Counter()
        self.mnemonics = []

    def add(self, base, mnemonic):
        self.opcodes[base] += 1
        self.mnemonics.append(mnemonic)

    def count(self, shape):
        """Instructions of one GEMM shape, e.g. HGMMA.64x8x16 (HGMMA.64x8x16.F32.BF16 counts)."""
        return sum(1 for m in self.mnemonics if m.startswith(shape + "."))

    @functools.cached_property
    def branched_exponentials(self):
        """Pairs of MUFU.EX2 at most EXPONENTIAL_PAIR_SPAN instructions apart with a branch between them."""
        ex2 = [i for i, m in enumerate(self.mnemonics) if m.startswith("MUFU.EX2")]
        return sum(1 for a, b in zip(ex2, ex2[1:])
                   if b - a <= EXPONENTIAL_PAIR_SPAN and any(m.split(".")[0] in ("BRA", "BSSY")
                                                             for m in self.mnemonics[a + 1:b]))


def parse_sass(sass):
    """{mangled function name: KernelSass}."""
    functions = {}
    current = None
    for line in sass.splitlines():
        match = FUNCTION.match(line)
        if match:
            current = functions.setdefault(match.group(1), KernelSass())
            continue
        if SECTION_END.match(line):
            current = None
            continue
        if current is not None:
            match = INSTRUCTION.search(line)
            if match:
                current.add(match.group(2), match.group(1))
    return functions


def demangle(names):
    filt = shutil.which("c++filt")
    if not names or filt is None:
        return {n: n for n in names}
    result = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True)
    lines = result.stdout.splitlines()
    return dict(zip(names, lines)) if result.returncode == 0 and len(lines) == len(names) else {n: n for n in names}


def is_fp8(name):
    lowered = name.lower()
    return "fp8" in lowered or "e4m3" in lowered


def problems(name, kernel):
    """What the attention kernel `name` lacks or must not have; empty when it passes."""
    ops = kernel.opcodes
    gemm = "QGMMA" if is_fp8(name) else "HGMMA"
    missing = [op for op in (gemm, "UTMALDG") if ops[op] == 0]
    found = []
    if missing:
        found.append("missing " + ", ".join(missing))
    if ops["LDL"] or ops["STL"]:
        found.append(f"local memory (LDL {ops['LDL']}, STL {ops['STL']})")
    for pattern, narrow_op in TRANSPOSED_DECODE_KERNELS:
        if pattern.search(name) and kernel.count(narrow_op) == 0:
            found.append(f"missing {narrow_op} (the transposed decoding loop)")
    branched = kernel.branched_exponentials
    if branched > MAX_BRANCHED_EXPONENTIALS:
        found.append(f"exponentials behind branches ({branched} MUFU.EX2 pairs, at most {MAX_BRANCHED_EXPONENTIALS})")
    return found


def check(paths, cuobjdump, nvdisasm_dir):
    failures = 0
    for path in paths:
        functions = parse_sass(dump_sass(cuobjdump, nvdisasm_dir, path))
        kernels = sorted(n for n in functions if ATTENTION_KERNEL.search(n))
        forward = [n for n in kernels if FORWARD_KERNEL.search(n)]
        pretty = demangle(kernels)
        print(f"{path}: {len(functions)} kernels, {len(forward)} forward and {len(kernels) - len(forward)} backward "
              "instantiations")
        if not forward:
            print(f"FAIL  {path}: no {FORWARD_KERNEL.pattern} instantiation in its SASS")
            failures += 1
        for name in kernels:
            kernel = functions[name]
            ops = kernel.opcodes
            found = problems(name, kernel)
            verdict = "FAIL" if found else "ok  "
            print(f"{verdict}  {pretty[name]}\n      HGMMA {ops['HGMMA']} (64x8 {kernel.count('HGMMA.64x8x16')})"
                  f"  QGMMA {ops['QGMMA']} (64x8 {kernel.count('QGMMA.64x8x32')})  UTMALDG {ops['UTMALDG']}"
                  f"  LDL {ops['LDL']}  STL {ops['STL']}  branched EX2 {kernel.branched_exponentials}"
                  f"  instructions {sum(ops.values())}"
                  + (f"  <- {'; '.join(found)}" if found else ""))
            failures += bool(found)
    print(f"{'FAILED' if failures else 'PASSED'}: {failures} problem(s)")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="object files or static libraries to inspect")
    parser.add_argument("--cuda-bin-dir", help="the CUDA toolkit's bin folder (CMake's CUDAToolkit_BIN_DIR)")
    parser.add_argument("--tools-dir", help="where --install-only puts cuobjdump and nvdisasm from PyPI")
    parser.add_argument("--install-only", action="store_true",
                        help="install cuobjdump/nvdisasm into --tools-dir unless already found, then exit")
    args = parser.parse_args()

    tools = find_tools(args.cuda_bin_dir, args.tools_dir)
    if args.install_only:
        if args.tools_dir is None:
            parser.error("--install-only needs --tools-dir")
        if tools is None:
            install_tools(args.tools_dir)
            tools = find_tools(args.cuda_bin_dir, args.tools_dir)
        print(f"cuobjdump: {tools[0] if tools else 'still not found'}")
        return 0 if tools else 2
    if not args.files:
        parser.error("name at least one object file or library")
    if tools is None:
        print("error: cuobjdump and nvdisasm not found in --cuda-bin-dir, on PATH or under --tools-dir; "
              "run with --install-only --tools-dir DIR (pip installs them) or install the full CUDA toolkit")
        return 2
    return check(args.files, *tools)


if __name__ == "__main__":
    sys.exit(main())
