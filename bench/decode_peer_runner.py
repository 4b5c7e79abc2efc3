"""decode_peers.py's run on the GPU: every (shape, peer) pair checked, then timed; a failure is recorded
in its row and the run goes on."""
import warnings

import torch

from decode_peer_calls import CHECK_TOLERANCE, check_error, expand_heads, peer_call
from decode_shapes import SHAPE_FIELDS, dense_equivalent, dense_key, shape_text, skip_reason
from peer_timing import SleepGate, copy_tbps, input_sets_for, median_gpu_ms

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def error_text(e, caught_warnings=()):
    """An exception's type and first line, with the reasons PyTorch gave as warnings (SDPA says why a
    backend refused only there)."""
    lines = [line for line in str(e).splitlines() if line.strip()]
    text = f"{type(e).__name__}: {lines[0] if lines else ''}"
    reasons = [str(w.message).splitlines()[0] for w in caught_warnings]
    return (text + (" | " + "; ".join(reasons) if reasons else ""))[:600]


class PeerError(RuntimeError):
    """A peer call failed; the message is its error_text."""


def run_once(call):
    """call() to completion; a failure raises PeerError."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = call()
            torch.cuda.synchronize()
            return out
        except Exception as e:
            raise PeerError(error_text(e, caught)) from e


def make_set(row, expand_kv, device, kv_layout="heads-major"):
    """Random q (b, hq, sq, d), k and v (b, hkv, sk, d); k and v with hq heads when expand_kv. kv_layout
    keys-major: k and v stored (b, sk, hkv, d), as flash-attention and hopattn-bench lay them out, and
    passed as (b, hkv, sk, d) views; heads-major: stored as passed (each head's keys contiguous)."""
    b, hq, hkv, sq, sk, d = (row[k] for k in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "hdim"))
    dtype = TORCH_DTYPES[row["dtype"]]
    q = torch.randn(b, hq, sq, d, dtype=dtype, device=device)
    if kv_layout == "keys-major":
        k, v = (torch.randn(b, sk, hkv, d, dtype=dtype, device=device).transpose(1, 2) for _ in range(2))
    else:
        k, v = (torch.randn(b, hkv, sk, d, dtype=dtype, device=device) for _ in range(2))
    return (q, expand_heads(k, hq), expand_heads(v, hq)) if expand_kv else (q, k, v)


def moved_bytes(row, expand_kv):
    """The bytes of one input set a peer reads and writes: q, k and v (hq heads when expanded), out."""
    element = 2  # bf16 and fp16
    q = row["batch"] * row["heads_q"] * row["seqlen_q"] * row["hdim"]
    kv = row["batch"] * (row["heads_q"] if expand_kv else row["heads_kv"]) * row["seqlen_k"] * row["hdim"]
    return element * (2 * q + 2 * kv)


class PeerRunner:
    def __init__(self, iters, warmup, group=1, device="cuda", kv_layout="heads-major"):
        self.iters, self.warmup, self.group, self.device = iters, warmup, group, device
        self.kv_layout = kv_layout
        self.gate = SleepGate()
        self._check_errors = {}  # check_error per (impl, heads, sq, d, causal, expanded, dtype)

    def checked_error(self, impl, row, expand_kv):
        key = (impl, expand_kv) + tuple(row[k] for k in ("heads_q", "heads_kv", "seqlen_q", "hdim", "causal", "dtype"))
        if key not in self._check_errors:
            self._check_errors[key] = check_error(impl, row["heads_q"], row["heads_kv"], row["seqlen_q"], row["hdim"],
                                                  row["causal"], expand_kv, TORCH_DTYPES[row["dtype"]], self.device)
        return self._check_errors[key]

    def time_peer(self, impl, row):
        """impl on row's dense shape: the peer fields of its JSON row. A failure is recorded in them."""
        result = dict(impl=impl, status="error", ms=None, tflops=None, kv_tbps=None, moved_bytes=None, moved_tbps=None,
                      iters=0, input_sets=0, expanded_kv=False, backlog_held=None, check_max_abs_err=None, message="")
        notes = []
        try:
            self._measure(impl, row, result, notes)
        except Exception as e:  # the run goes on
            notes.append(str(e) if isinstance(e, PeerError) else error_text(e))
        result["message"] = "; ".join(notes)
        torch.cuda.empty_cache()  # the row's tensors are gone: give their memory back for the next shapes
        return result

    def _measure(self, impl, row, result, notes):
        causal = row["causal"]
        sets = [make_set(row, False, self.device, self.kv_layout)]
        # The calls are made inside run_once too: a backend may refuse while the call is built.
        try:
            run_once(lambda: peer_call(impl, *sets[0], causal, False)())
        except PeerError as gqa_error:
            if row["heads_q"] == row["heads_kv"]:
                raise
            q, k, v = sets.pop()
            sets.append((q, expand_heads(k, row["heads_q"]), expand_heads(v, row["heads_q"])))
            del k, v
            try:
                run_once(lambda: peer_call(impl, *sets[0], causal, True)())
            except PeerError as e:
                raise PeerError(f"with enable_gqa: {gqa_error}; with k and v expanded to hq heads: {e}") from e
            result["expanded_kv"] = True
            notes.append(f"refuses GQA ({gqa_error}); timed with k and v repeated to hq heads, reading "
                         f"{row['heads_q'] // row['heads_kv']}x the K/V bytes")
        expand = result["expanded_kv"]
        error = result["check_max_abs_err"] = self.checked_error(impl, row, expand)
        if not error <= CHECK_TOLERANCE:  # NaN included
            notes.append(f"disagrees with the float32 reference on a small copy of the shape (max abs err "
                         f"{error:.3g} > {CHECK_TOLERANCE}); not timed")
            return
        per_set = moved_bytes(row, expand)
        n_sets = input_sets_for(per_set)
        sets += [make_set(row, expand, self.device, self.kv_layout) for _ in range(n_sets - 1)]
        calls = [peer_call(impl, q, k, v, causal, expand) for q, k, v in sets]
        ms, held = median_gpu_ms(calls, self.gate, self.iters, self.warmup, self.group)
        if not torch.isfinite(run_once(calls[0])).all():
            notes.append("its output has NaN/Inf")
            return
        result.update(status="ok", ms=ms, tflops=row["flops"] / (ms * 1e9), kv_tbps=row["bytes"] / (ms * 1e9),
                      moved_bytes=per_set, moved_tbps=per_set / (ms * 1e9), iters=self.iters, input_sets=n_sets,
                      backlog_held=held)
        if not held:
            notes.append("the sleep ran out before every timed call was queued: times may include host gaps")


def print_record(r):
    if r["status"] == "ok":
        timing = f"{r['ms'] * 1e3:9.1f} us {r['kv_tbps']:5.2f} TB/s"
    else:
        timing = f"{r['status']:>21s}"
    flags = "".join(f" [{flag}]" for flag, on in (("expanded kv", r["expanded_kv"]),
                                                  ("dense equivalent", r["dense_equivalent"])) if on)
    message = f"  {r['message']}" if r["message"] else ""
    print(f"{r['impl']:14s} {shape_text(r)} {timing}{flags}{message}", flush=True)


def run_all(rows, impls, iters, warmup, group=1, kv_layout="heads-major"):
    """Every peer on every row that has one, `group` calls between a pair of events (median_gpu_ms), k and
    v laid out as kv_layout says (make_set); the JSON document decode_peers.py writes, less its header."""
    if not torch.cuda.is_available():
        raise SystemExit("decode_peers.py: no CUDA GPU visible to PyTorch (--dry-run prints the plan without one)")
    device = torch.cuda.get_device_name()
    print(f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {device}", flush=True)
    runner = PeerRunner(iters, warmup, group, kv_layout=kv_layout)
    ceilings = {"copy_tbps": copy_tbps(runner.gate)}
    print(f"device-to-device copy: {ceilings['copy_tbps']:.2f} TB/s (bytes read + written / time)", flush=True)
    measured = {}  # one measurement per (impl, dense shape), shared by its paged and seqused_k rows
    records = []
    for row in rows:
        reason = skip_reason(row)
        if reason:
            print(f"skip           {shape_text(row)}: {reason}", flush=True)
            continue
        for impl in impls:
            key = (impl,) + dense_key(row)
            if key not in measured:
                measured[key] = runner.time_peer(impl, row)
            record = {k: row[k] for k in SHAPE_FIELDS + ("variant",)}
            record.update(page_size=row.get("page_size", 0), cache_seqlen_k=row.get("cache_seqlen_k", 0),
                          flops=row["flops"], bytes=row["bytes"], dense_equivalent=dense_equivalent(row))
            record.update(measured[key])
            records.append(record)
            print_record(record)
    return dict(device=device, torch=torch.__version__, cudnn=torch.backends.cudnn.version(), iters=iters,
                warmup=warmup, back_to_back=group > 1, kv_layout=kv_layout, impls=impls, ceilings=ceilings, rows=records)
