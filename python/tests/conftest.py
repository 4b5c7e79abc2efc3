"""Fresh random inputs each run: the seed comes from the OS unless HOPATTN_TEST_SEED is set, and
is printed so that a failure can be replayed (pytest shows the output of failed tests)."""

import os

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("HOPATTN_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"HOPATTN_TEST_SEED={seed} ({request.node.nodeid})")
    return np.random.default_rng(seed)
