"""bench/ncu_top_sass.py on synthetic ncu source-page CSVs: lines ranked by stall samples (numbers with
thousands separators), shares of the total, and the header printed when the columns are not ncu's.

  python3 tests/bench/test_ncu_top_sass.py   (ctest: bench_ncu_top_sass)
"""
import os
import random
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "ncu_top_sass.py")
HEADER = ["# Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
          "Instructions Executed"]


def write_csv(directory, rows):
    path = os.path.join(directory, "source.csv")
    with open(path, "w") as f:
        f.write('"Kernel Name","x"\n')  # ncu prints a preamble before the table
        for row in rows:
            f.write(",".join(f'"{c}"' for c in row) + "\n")
    return path


def run(path, count):
    result = subprocess.run([sys.executable, SCRIPT, path, str(count)], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(result.stderr)
    return result.stdout.splitlines()


class NcuTopSass(unittest.TestCase):
    def test_ranks_lines_by_samples(self):
        rng = random.Random(0x5a55)
        samples = rng.sample(range(1, 200000), 25)
        rows = [HEADER] + [[f"0x{i:04x}", f"OP{i} R{i}", f"{s:,}", f"{s // 2:,}", f"{7 * s:,}"]
                           for i, s in enumerate(samples)]
        with tempfile.TemporaryDirectory() as d:
            out = run(write_csv(d, rows), 5)
        total = sum(samples)
        self.assertEqual(out[0], f"total samples {total}")
        top = sorted(range(len(samples)), key=lambda i: -samples[i])[:5]
        self.assertEqual(len(out), 6)
        for line, i in zip(out[1:], top):
            fields = line.split()
            self.assertEqual(int(fields[0]), samples[i])
            self.assertAlmostEqual(float(fields[1].rstrip("%")), 100 * samples[i] / total, delta=0.051)
            self.assertEqual(int(fields[3]), samples[i] // 2)
            self.assertEqual(int(fields[5]), 7 * samples[i])
            self.assertTrue(line.endswith(f"OP{i} R{i}"), line)

    def test_other_columns_print_the_header(self):
        with tempfile.TemporaryDirectory() as d:
            out = run(write_csv(d, [["# Address", "Source", "Something Else"], ["0x0", "NOP", "1"]]), 5)
        self.assertTrue(out[0].startswith("columns:"), out)
        self.assertIn("Something Else", out[0])


if __name__ == "__main__":
    unittest.main()
