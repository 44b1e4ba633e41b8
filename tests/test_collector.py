"""The garbage collector's thresholds during a run: enlarged inside, restored after."""

import gc

import pytest

from p2pfed.engine.collector import fewer_collections


def test_young_generation_enlarged_inside_and_restored_after():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with fewer_collections(young=5000):
            assert gc.get_threshold() == (5000, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_restored_after_an_error_and_collection_left_off():
    before = gc.get_threshold()
    try:
        gc.set_threshold(0)
        with pytest.raises(RuntimeError), fewer_collections():
            assert gc.get_threshold()[0] == 0   # off stays off
            raise RuntimeError
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)


def test_young_must_be_positive():
    with pytest.raises(ValueError), fewer_collections(young=0):
        pass
