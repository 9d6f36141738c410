"""hpcio.simulate.pool: engines' slots shared by threads (work behind others yields), an
error beside the work ends it as one error, and a forked engine runs SCHED_BATCH."""

import os
import signal
import threading
import time

import pytest

from hpcio.errors import HpcioError
from hpcio.simulate import pool


def test_a_slot_goes_to_work_in_front_before_work_behind(monkeypatch):
    monkeypatch.setenv("HPCIO_SIM_JOBS", "1")
    cores = pool._Cores()
    front_r, front_w = os.pipe()
    back_r, back_w = os.pipe()
    try:
        held = cores.take(front_w, 0)
        assert held is not None and cores.take(back_w, 1) is None  # none free
        assert cores.take(front_w, 0) is None                     # both wait now
        cores.give(held)
        assert os.read(back_r, 16) and os.read(front_r, 16)        # both woken
        assert cores.take(back_w, 1) is None                      # front waits: yield
        again = cores.take(front_w, 0)
        assert again is not None
        cores.forget(front_w)
        cores.give(again)
        assert cores.take(back_w, 1) is not None                  # none in front now
    finally:
        for fd in (front_r, front_w, back_r, back_w):
            os.close(fd)


def test_together_returns_in_order_and_raises_the_real_error():
    assert pool.together([(lambda a: a + 1, (1,)), (lambda: "b", ())]) == [2, "b"]

    def fails():
        raise HpcioError("the second failed")
    with pytest.raises(HpcioError, match="the second failed"):
        pool.together([(time.sleep, (0.01,)), (fails, ())])


def test_beside_raises_the_block_error_and_its_own():
    seen = []
    with pytest.raises(HpcioError, match="block"):
        with pool.beside(seen.append, 1):
            raise HpcioError("block")
    assert seen == [1]
    with pytest.raises(ValueError, match="beside"):
        with pool.beside(lambda: (_ for _ in ()).throw(ValueError("beside"))):
            pass


@pytest.mark.mpi  # forks engines
def test_engines_of_two_threads_share_the_slots_batch_scheduled(monkeypatch):
    monkeypatch.setenv("HPCIO_SIM_JOBS", "1")

    def work(chunk, tick):
        tick()
        return [(x * 2, os.sched_getscheduler(0)) for x in chunk]
    out = pool.together([(pool.run, (work, [[1], [2, 3]])), (pool.run, (work, [[4]]))])
    assert [[[v for v, _ in c] for c in part] for part in out] == [[[2], [4, 6]], [[8]]]
    policies = {p for part in out for chunk in part for _, p in chunk}
    if hasattr(os, "SCHED_BATCH"):
        assert policies == {os.SCHED_BATCH}


@pytest.mark.mpi  # forks engines
def test_a_failed_engine_stops_the_work_beside_it_quickly(monkeypatch):
    monkeypatch.setenv("HPCIO_SIM_JOBS", "2")

    def slow(chunk, tick):
        time.sleep(30)

    def bad(chunk, tick):
        raise RuntimeError("engine broke")
    before = set(threading.enumerate())   # other tests' threads in this worker stay
    t0 = time.monotonic()
    with pytest.raises(HpcioError, match="engine broke"):
        pool.together([(pool.run, (slow, [[0]])), (pool.run, (bad, [[0]]))])
    assert time.monotonic() - t0 < 5
    assert set(threading.enumerate()) <= before    # the work's threads have ended



@pytest.mark.mpi  # forks engines
def test_an_engine_killed_once_runs_again_twice_is_one_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCIO_SIM_JOBS", "1")

    def dies_once(chunk, tick):
        mark = tmp_path / f"died-{chunk[0]}"
        if not mark.exists():
            mark.touch()
            os.kill(os.getpid(), signal.SIGABRT)
        return chunk
    assert pool.run(dies_once, [[1], [2]]) == [[1], [2]]

    def dies(chunk, tick):
        os.kill(os.getpid(), signal.SIGABRT)
    with pytest.raises(HpcioError, match="engine died"):
        pool.run(dies, [[1]])
