"""``solver.gcpause``: the cyclic collector is paused inside the block and left as it was found after it."""

from __future__ import annotations

import gc

import pytest

from solver.gcpause import paused_collection


def test_collection_is_paused_inside_and_restored_after_even_when_nested_or_failing() -> None:
    assert gc.isenabled()
    with paused_collection():
        assert not gc.isenabled()
        with paused_collection():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves the outer one's pause alone
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_collection():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    try:
        with paused_collection():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
