"""Fresh random inputs each run: the seed comes from the OS unless HOPATTN_TEST_SEED is set, and
is printed so that a failure can be replayed (pytest shows the output of failed tests). Also
recorders of what reaches the library's functions."""

import os

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("HOPATTN_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"HOPATTN_TEST_SEED={seed} ({request.node.nodeid})")
    return np.random.default_rng(seed)


def record_keyword(monkeypatch, owner, name, keyword):
    """The `keyword` argument of every call of owner.name the test makes, in order (the calls still
    run)."""
    seen = []
    function = getattr(owner, name)

    def recording(*args, **kwargs):
        seen.append(kwargs[keyword])
        return function(*args, **kwargs)

    monkeypatch.setattr(owner, name, recording)
    return seen


@pytest.fixture
def pack_gqa_passed(monkeypatch):
    """The pack_gqa value of every hopattn._C.forward call the test makes."""
    import hopattn

    return record_keyword(monkeypatch, hopattn._C, "forward", "pack_gqa")


@pytest.fixture
def deterministic_passed(monkeypatch):
    """The deterministic value of every hopattn._core.backward call the test makes."""
    import hopattn

    return record_keyword(monkeypatch, hopattn._core, "backward", "deterministic")
