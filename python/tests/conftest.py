"""Fresh random inputs each run: the seed comes from the OS unless HOPATTN_TEST_SEED is set, and
is printed so that a failure can be replayed (pytest shows the output of failed tests). Also a
recorder of what reaches the binding."""

import os

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("HOPATTN_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"HOPATTN_TEST_SEED={seed} ({request.node.nodeid})")
    return np.random.default_rng(seed)


@pytest.fixture
def pack_gqa_passed(monkeypatch):
    """The pack_gqa value of every hopattn._C.forward call the test makes, in order (the calls still
    run)."""
    import hopattn

    seen = []
    binding_forward = hopattn._C.forward

    def recording(*args, **kwargs):
        seen.append(kwargs["pack_gqa"])
        return binding_forward(*args, **kwargs)

    monkeypatch.setattr(hopattn._C, "forward", recording)
    return seen
