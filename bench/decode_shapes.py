"""The rows of a hopattn-bench JSON as decode_peers.py and decode_report.py see them: which have a
PyTorch peer, which the peers time in dense form, and the key that pairs a peer's row with ours.
Standard library only."""
import json
import os
import re
import sys

SHAPE_FIELDS = ("dtype", "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "hdim", "causal")
PEER_DTYPES = ("bf16", "fp16")


def load_rows(path, tool, need=("flops", "bytes")):
    """The document and "rows" of `tool`'s --json output (tool: "hopattn-bench" or "decode_peers.py", as
    its "tool" field says); exits with a message when the file is not one."""
    me = os.path.basename(sys.argv[0])
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"{me}: cannot read the {tool} JSON '{path}': {e}")
    rows = doc.get("rows") if isinstance(doc, dict) else None
    fields = SHAPE_FIELDS + tuple(need)
    if doc.get("tool") != tool or not isinstance(rows, list) or any(not all(k in r for k in fields) for r in rows):
        sys.exit(f"{me}: '{path}' is not {tool} --json output (a \"tool\": \"{tool}\" document whose rows have "
                 f"{', '.join(fields)})")
    return doc, rows


def skip_reason(row):
    """Why a hopattn-bench row has no PyTorch peer, or None."""
    if row.get("backward"):
        return "a backward row"
    if row["dtype"] not in PEER_DTYPES:
        return f"dtype {row['dtype']} (PyTorch's attention takes bf16 or fp16)"
    if not re.fullmatch(r"default|kv_heads_major|varlen|paged_\d+|seqused_k", row["variant"]):
        return f"variant {row['variant']} has no SDPA form"
    if row["causal"] and row["seqlen_q"] > row["seqlen_k"]:
        return "causal with seqlen_q > seqlen_k (rows that see no key)"
    if row.get("hdim_v", row["hdim"]) != row["hdim"]:
        return f"v of head dim {row['hdim_v']} beside q/k's {row['hdim']} (not every SDPA backend takes it)"
    return None


def kv_layout(row):
    """How a hopattn-bench row's k and v lay in memory, in decode_peers.py --kv-layout's words."""
    return "heads-major" if row.get("kv_heads_major") else "keys-major"


def dense_equivalent(row):
    """True when the peers time the dense shape of the row's keys in place of its layout (paged,
    seqused_k, packed): SDPA has no form of those."""
    return row.get("page_size", 0) > 0 or row.get("cache_seqlen_k", 0) > 0 or row["variant"] == "varlen"


def dense_key(row):
    """The math of a row: rows with one dense_key are the same attention."""
    return tuple(row[k] for k in SHAPE_FIELDS)


def pair_key(row):
    """What pairs a peer's row with ours: the shape and the variant."""
    return dense_key(row) + (row["variant"],)


def shape_text(row):
    return (f"{row['dtype']} b {row['batch']:2d} h {row['heads_q']:2d}/{row['heads_kv']:<2d} sq {row['seqlen_q']} "
            f"sk {row['seqlen_k']:5d} d {row['hdim']:3d} {'causal' if row['causal'] else 'non-causal':10s} "
            f"{row['variant']}")
