"""The decode benchmark's tools without a GPU: hopattn-bench --grid decode --list, decode_peers.py
--dry-run (which must not need PyTorch), decode_report.py's pairing and ratios, and, where PyTorch is
installed, the peers' masks and GQA mapping on the CPU.

  python3 tests/bench/test_decode_tools.py --bench build/bench/hopattn-bench   (ctest: bench_decode_tools)
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

BENCH_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
BENCH_BIN = None  # set from --bench


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


class DecodeTools(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.shapes_path = os.path.join(cls.tmp.name, "shapes.json")
        listed = run([BENCH_BIN, "--grid", "decode", "--list", "--json", cls.shapes_path])
        assert listed.returncode == 0, listed.stderr
        with open(cls.shapes_path) as f:
            cls.shapes = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def write(self, name, doc):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def test_list_writes_the_grid_untimed(self):
        doc = self.shapes
        self.assertEqual((doc["tool"], doc["grid"], doc["backend"]), ("hopattn-bench", "decode", "none"))
        self.assertTrue(doc["queue_ahead"])
        self.assertFalse(doc["write_lse"])
        rows = doc["rows"]
        self.assertTrue(30 <= len(rows) <= 45, len(rows))
        for r in rows:
            self.assertEqual(r["status"], "not_run")
            self.assertIsNone(r["kv_tbps"])
            self.assertIn(r["seqlen_q"], (1, 4))
            kv = 2 * r["batch"] * r["heads_kv"] * r["seqlen_k"] * r["hdim"] * 2
            q = r["batch"] * r["heads_q"] * r["seqlen_q"] * r["hdim"] * 2
            self.assertEqual(r["bytes"], kv + 2 * q)
        self.assertEqual({r["variant"] for r in rows}, {"default", "paged_256", "paged_16", "paged_1", "seqused_k"})

    def test_dry_run_plans_every_row_without_torch(self):
        # A torch that cannot be imported: the dry run must not reach for it.
        fake = os.path.join(self.tmp.name, "no_torch", "torch")
        os.makedirs(fake, exist_ok=True)
        with open(os.path.join(fake, "__init__.py"), "w") as f:
            f.write("raise ImportError('decode_peers.py --dry-run imported torch')\n")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(fake))
        out = run([sys.executable, os.path.join(BENCH_DIR, "decode_peers.py"), "--shapes", self.shapes_path,
                   "--dry-run", "--flex"], env=env)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(len([line for line in lines if line.startswith("time ")]), len(self.shapes["rows"]))
        speculative = [line for line in lines if " sq 4 " in line]
        self.assertEqual(len(speculative), 1)
        self.assertIn("sdpa_flash: causal_lower_right", speculative[0])
        self.assertIn("sdpa_cudnn: bool mask (bottom-right)", speculative[0])
        self.assertIn("flex: block mask (bottom-right)", speculative[0])
        self.assertTrue(all("dense equivalent" in line for line in lines if "paged_" in line or "seqused_k" in line))

    def test_wide_grid_dry_run_skips_v_of_its_own_head_dim_and_fp8(self):
        path = os.path.join(self.tmp.name, "wide.json")
        listed = run([BENCH_BIN, "--grid", "decode_wide", "--list", "--json", path])
        self.assertEqual(listed.returncode, 0, listed.stderr)
        with open(path) as f:
            rows = json.load(f)["rows"]
        self.assertEqual({r["hdim"] for r in rows}, {192, 256})
        out = run([sys.executable, os.path.join(BENCH_DIR, "decode_peers.py"), "--shapes", path, "--dry-run"])
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        skipped = [line for line in lines if line.startswith("skip ")]
        self.assertEqual(len(skipped), 4, skipped)  # the 192 / 128 row and the three FP8 rows
        self.assertEqual(len([line for line in skipped if "v of head dim 128 beside q/k's 192" in line]), 1)
        self.assertEqual(len([line for line in skipped if "dtype fp8" in line]), 3)
        self.assertEqual(len([line for line in lines if line.startswith("time ")]), len(rows) - 4)

    def test_peers_refuse_other_json(self):
        path = self.write("not_bench.json", {"tool": "decode_peers.py", "rows": []})
        out = run([sys.executable, os.path.join(BENCH_DIR, "decode_peers.py"), "--shapes", path, "--dry-run"])
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("is not hopattn-bench --json output", out.stderr)
        out = run([sys.executable, os.path.join(BENCH_DIR, "decode_peers.py"), "--shapes", path, "--impl", "nope"])
        self.assertEqual(out.returncode, 2)
        self.assertIn("--impl takes", out.stderr)

    def test_report_pairs_rows_and_ratios(self):
        ours = dict(self.shapes, device="NVIDIA H200 (sm_90, 132 SMs)", backend="sm90")
        ours["rows"] = [dict(r, status="ok", ms=0.1, kv_tbps=r["bytes"] / 1e8) for r in self.shapes["rows"]]
        peer_rows = []
        for r in self.shapes["rows"]:
            for impl, ms, expanded in (("sdpa_flash", 0.2, False), ("sdpa_cudnn", 0.05, True)):
                shape = {k: r[k] for k in ("dtype", "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "hdim",
                                           "causal", "variant", "flops", "bytes")}
                peer_rows.append(dict(shape, impl=impl, status="ok", ms=ms, tflops=1.0, kv_tbps=r["bytes"] / (ms * 1e9),
                                      expanded_kv=expanded, moved_bytes=r["bytes"], backlog_held=True, message=""))
        peers = {"tool": "decode_peers.py", "impls": ["sdpa_flash", "sdpa_cudnn"], "ceilings": {"copy_tbps": 4.0},
                 "rows": peer_rows}
        out_dir = os.path.join(self.tmp.name, "report")
        out = run([sys.executable, os.path.join(BENCH_DIR, "decode_report.py"), "--ours", self.write("ours.json", ours),
                   "--peers", self.write("peers.json", peers), "--out-dir", out_dir])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("spec peak 4.8 TB/s", out.stdout)
        self.assertIn("geomean ours/sdpa_flash: 0.500", out.stdout)
        [name] = os.listdir(out_dir)
        self.assertTrue(name.endswith("-h200-decode.json"), name)
        with open(os.path.join(out_dir, name)) as f:
            shapes = json.load(f)["shapes"]
        self.assertEqual(len(shapes), len(self.shapes["rows"]))
        for e in shapes:
            self.assertAlmostEqual(e["peers"]["sdpa_flash"]["ours_over_peer"], 0.5)
            self.assertAlmostEqual(e["peers"]["sdpa_cudnn"]["ours_over_peer"], 2.0)
            # cuDNN was faster but read expanded K/V: the best like-for-like peer is flash.
            self.assertEqual(e["best_peer"], "sdpa_flash")
            self.assertEqual(e["dense_equivalent_peers"], e["variant"] != "default")
        self.assertNotIn("not like for like", out.stdout)
        # One side timed back to back (--back-to-back), the other call by call: the report says so.
        peers["back_to_back"] = True
        out = run([sys.executable, os.path.join(BENCH_DIR, "decode_report.py"), "--ours", self.write("ours.json", ours),
                   "--peers", self.write("peers.json", peers), "--out-dir", out_dir])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("timed back to back in groups of 10", out.stdout)
        self.assertIn("the ratios are not like for like", out.stdout)
        # The peers read k and v heads-major (decode_peers.py's default), ours keys-major: the report says
        # so; with --kv-layout keys-major on their side, or ours --kv-heads-major, it does not.
        self.assertIn("ours read k and v keys-major and the peers heads-major", out.stdout)
        peers["back_to_back"] = False
        for layouts in ((dict(kv_layout="keys-major"), {}), ({}, dict(kv_heads_major=True))):
            peers_doc = dict(peers, **layouts[0])
            ours_doc = dict(ours, rows=[dict(r, **layouts[1]) for r in ours["rows"]])
            out = run([sys.executable, os.path.join(BENCH_DIR, "decode_report.py"), "--ours",
                       self.write("ours.json", ours_doc), "--peers", self.write("peers.json", peers_doc),
                       "--out-dir", out_dir])
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertNotIn("not the same memory", out.stdout)


@unittest.skipUnless(HAVE_TORCH, "PyTorch not installed")
class PeerSemanticsOnCpu(unittest.TestCase):
    def setUp(self):
        import torch

        self.torch = torch
        sys.path.insert(0, BENCH_DIR)
        import decode_peer_calls

        self.calls = decode_peer_calls

    def test_mask_is_torch_lower_right(self):
        from torch.nn.attention.bias import causal_lower_right

        for sq, sk in ((4, 64), (3, 7), (1, 5)):
            expected = causal_lower_right(sq, sk)._materialize(device="cpu")
            self.assertTrue(self.torch.equal(self.calls.bottom_right_mask(sq, sk, "cpu")[0, 0], expected))

    def test_reference_maps_q_heads_to_kv_heads(self):
        torch = self.torch
        q, k, v = torch.randn(1, 6, 2, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
        out = self.calls.reference(q, k, v, causal=False)
        for h in range(6):  # q head h reads kv head h // 3
            p = torch.softmax(q[0, h] @ k[0, h // 3].T / 8**0.5, dim=-1)
            torch.testing.assert_close(out[0, h], p @ v[0, h // 3])

    def test_flash_on_cpu_matches_the_reference(self):
        torch = self.torch
        for heads_q, heads_kv, expand in ((32, 8, False), (28, 4, True), (8, 8, False)):
            error = self.calls.check_error("sdpa_flash", heads_q, heads_kv, 1, 64, False, expand, torch.bfloat16, "cpu")
            self.assertLess(error, self.calls.CHECK_TOLERANCE)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", required=True, help="the hopattn-bench binary")
    known, rest = parser.parse_known_args()
    BENCH_BIN = known.bench
    unittest.main(argv=[sys.argv[0]] + rest)
