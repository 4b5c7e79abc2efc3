#!/usr/bin/env python3
"""Time PyTorch's attention on hopattn-bench's decode shapes, so that hopattn's decoding speed can be
stated as a ratio against a peer timed on the same GPU in the same session (bench/device_bench.sh
--grid decode runs hopattn-bench, this, and bench/decode_report.py, which pairs the rows).

  hopattn-bench --grid decode --list --json shapes.json        # the shapes; runs on any machine
  python3 bench/decode_peers.py --shapes shapes.json --json peers.json [--flex] [--impl sdpa_cudnn]
  python3 bench/decode_peers.py --shapes shapes.json --dry-run  # the plan; needs no PyTorch

Peers: F.scaled_dot_product_attention under one backend each (sdpa_flash: FLASH_ATTENTION, sdpa_cudnn:
CUDNN_ATTENTION, sdpa_efficient: EFFICIENT_ATTENTION) and, with --flex, FlexAttention (torch.compile;
every shape compiles anew, tens of seconds each). q is (b, hq, sq, d), k and v (b, hkv, sk, d) (their
storage: below), in the shape's dtype.

How a row is timed, and what its JSON fields say:
- GQA through enable_gqa=True. A backend that refuses it gets k and v repeated to hq heads outside the
  timed region (expanded_kv: true): it then reads hq/hkv times the K/V bytes (moved_bytes), so its
  ratio is not like for like.
- Causal with sq > 1 is bottom-right aligned as in hopattn (query i sees keys j <= i + sk - sq):
  sdpa_flash through causal_lower_right (the flash kernel's own causal), the other backends through a
  boolean mask, flex through a block mask. With sq 1 causal hides no key and nothing is passed.
- Paged and seqused_k rows (page_size, cache_seqlen_k > 0) have no SDPA form: the dense shape of the
  same keys is timed (dense_equivalent: true), once for all rows that share it.
- k and v are stored heads-major, (b, hkv, sk, d) contiguous, unless --kv-layout keys-major stores
  them (b, sk, hkv, d), as hopattn-bench does by default (its --kv-heads-major: SDPA's), and passes
  transposed views: then both sides read the same memory layout.
- Inputs rotate over sets that together pass 128 MiB, so K and V come from HBM, as in hopattn-bench.
- All timed calls are queued behind a GPU sleep before any runs, as hopattn-bench --queue-ahead does,
  so each call's CUDA events time its GPU work and not PyTorch's host overhead (backlog_held: false
  when the sleep ran out first). Median of --iters calls after --warmup. With --back-to-back the events
  bracket groups of 10 calls (the time: a group's mean), as hopattn-bench --back-to-back, so that the
  calls' kernels follow one another as in a model's stream.
- Before timing, the call is checked against a float32 reference on a small copy of the shape
  (check_max_abs_err); a wrong answer is an error row, not a time. Failures are recorded per row
  (status "error", message) and the run goes on.
- bytes and flops are hopattn-bench's (q, k, v read and out written once; the FLOPs of the mask), so
  TB/s and TFLOP/s ratios against hopattn are time ratios.
"""
import argparse
import json
import sys
import time

from decode_shapes import dense_equivalent, load_rows, shape_text, skip_reason

DEFAULT_IMPLS = "sdpa_flash,sdpa_cudnn,sdpa_efficient"
BACK_TO_BACK_GROUP = 10  # as hopattn-bench's kBackToBackGroup (bench/gpu_timing.cpp)
SDPA_IMPLS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient")
KV_LAYOUTS = ("heads-major", "keys-major")


def causal_plan(row, impl):
    """How causal reaches impl for this row (the --dry-run text)."""
    if not row["causal"] or row["seqlen_q"] == 1:
        return "no mask" + (" (sq 1: causal hides no key)" if row["causal"] else "")
    if row["seqlen_q"] == row["seqlen_k"]:
        return "is_causal"
    plans = {"sdpa_flash": "causal_lower_right", "flex": "block mask (bottom-right)"}
    return plans.get(impl, "bool mask (bottom-right)")


def dry_run(rows, impls):
    for row in rows:
        reason = skip_reason(row)
        if reason:
            print(f"skip   {shape_text(row)}: {reason}")
            continue
        note = " (peers time its dense equivalent)" if dense_equivalent(row) else ""
        gqa = "enable_gqa" if row["heads_q"] != row["heads_kv"] else "MHA"
        plans = ", ".join(f"{impl}: {causal_plan(row, impl)}" for impl in impls)
        print(f"time   {shape_text(row)}{note}; {gqa}; {plans}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", required=True, help="JSON from hopattn-bench --json (e.g. --grid decode --list)")
    p.add_argument("--impl", default=DEFAULT_IMPLS, help=f"comma-separated SDPA peers (default {DEFAULT_IMPLS})")
    p.add_argument("--flex", action="store_true", help="also time FlexAttention (compiles every shape)")
    p.add_argument("--iters", type=int, default=50, help="timed calls per row (median; default 50)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls first (default 10)")
    p.add_argument("--back-to-back", action="store_true",
                   help="events around groups of 10 calls instead of each call, as hopattn-bench --back-to-back")
    p.add_argument("--kv-layout", choices=KV_LAYOUTS, default="heads-major",
                   help="k and v storage: heads-major (b, hkv, sk, d), SDPA's own (default), or keys-major "
                        "(b, sk, hkv, d), flash-attention's and hopattn-bench's (passed to SDPA as a view)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--dry-run", action="store_true", help="print what would be timed and how; no PyTorch needed")
    a = p.parse_args()
    a.impls = [i for i in a.impl.split(",") if i]
    if not a.impls or any(i not in SDPA_IMPLS for i in a.impls):
        p.error(f"--impl takes a comma-separated subset of {','.join(SDPA_IMPLS)} (flex: --flex); got '{a.impl}'")
    if a.flex:
        a.impls.append("flex")
    if a.iters < 1 or a.warmup < 1:
        p.error("--iters and --warmup want positive integers")
    return a


def main():
    a = parse_args()
    _, rows = load_rows(a.shapes, "hopattn-bench")
    if a.dry_run:
        dry_run(rows, a.impls)
        return 0
    from decode_peer_runner import run_all  # PyTorch is needed from here on

    doc = run_all(rows, a.impls, a.iters, a.warmup, BACK_TO_BACK_GROUP if a.back_to_back else 1, a.kv_layout)
    doc.update(tool="decode_peers.py", shapes_from=a.shapes, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
