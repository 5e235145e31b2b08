"""Per-batch random state: same numbers whichever thread or process builds the batch."""
import random
import threading

import numpy as np
import pytest

import speechiter
from speechiter.seeding import batch_seed, isolate_thread_random, permutation, seeded, stream_id


def draws(seed):
    with seeded(seed):
        return ([random.random() for _ in range(500)], np.random.rand(500).tolist(),
                speechiter.rng().random(500).tolist())


def test_batch_seed_depends_on_every_part():
    base = batch_seed(0, 1, 0)
    assert base == batch_seed(0, 1, 0)
    assert len({base, batch_seed(1, 1, 0), batch_seed(0, 2, 0), batch_seed(0, 1, 1), batch_seed(0, 1, 0, 7)}) == 5
    assert stream_id("train/sup") == stream_id("train/sup") != stream_id("train/unsup")


def test_seeded_restores_the_previous_generator():
    with seeded(1):
        outer = speechiter.rng()
        with seeded(2):
            assert speechiter.rng() is not outer
        assert speechiter.rng() is outer


@pytest.mark.timeout(60)
def test_threads_get_the_same_numbers_as_a_single_thread():
    expected = {seed: draws(seed) for seed in range(6)}
    isolate_thread_random()
    isolate_thread_random()  # idempotent
    results = {}
    barrier = threading.Barrier(6)

    def work(seed):
        barrier.wait()
        results[seed] = draws(seed)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == expected
    # Outside a batch the module functions still work on the global state.
    random.seed(3)
    first = random.random()
    random.seed(3)
    assert random.random() == first


def test_permutation_is_randomstate_permutation_in_every_thread():
    expected = {seed: np.random.RandomState(seed).permutation(50) for seed in (0, 7, 2**32 - 1)}
    results = {}

    def shuffle(name):
        results[name] = {seed: permutation(seed, 50) for seed in (7, 0, 2**32 - 1)}

    threads = [threading.Thread(target=shuffle, args=(f"t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    shuffle("main")
    for t in threads:
        t.join(timeout=30)
    assert len(results) == 4
    for got in results.values():
        for seed, order in got.items():
            np.testing.assert_array_equal(order, expected[seed])


def test_nested_batches_in_a_thread_keep_their_own_numpy_state():
    result = {}

    def worker():
        with seeded(2):
            first = np.random.rand(3)
            with seeded(1):
                inner = np.random.rand(3)
            result["outer"] = np.concatenate([first, np.random.rand(3)])
            result["inner"] = inner

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(timeout=30)
    np.testing.assert_array_equal(result["outer"], np.random.RandomState(2).rand(6))
    np.testing.assert_array_equal(result["inner"], np.random.RandomState(1).rand(3))
