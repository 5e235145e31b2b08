"""OrderedView (lazy epoch plans): reads exactly as the gathered view, and an epoch's plan copies no id."""
import numpy as np
import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.ids import encode_ids
from speechiter.iterator.block import BlockIterator
from speechiter.plan.ordered import OrderedView, clip_batches, reorder
from speechiter.plan.view import BatchView


def random_view(rng, padded):
    count = int(rng.integers(1, 60))
    ids = encode_ids([f"u{i:03d}" + "x" * int(rng.integers(0, 4)) for i in range(count)])
    cuts = np.unique(np.concatenate([[0, count], rng.integers(1, count + 1, rng.integers(0, 15))]))
    return BatchView(ids, cuts, rng.random(count) < 0.2 if padded else None)


def assert_reads_as(lazy, gathered):
    assert isinstance(lazy, OrderedView) and not isinstance(gathered, OrderedView)
    assert len(lazy) == len(gathered) and lazy.tolist() == gathered.tolist() == list(lazy)
    assert [lazy[i] for i in range(-len(lazy), len(lazy))] == [gathered[i] for i in range(-len(lazy), len(lazy))]
    assert lazy[1:5] == gathered[1:5] and repr(lazy) == repr(gathered)
    assert np.array_equal(lazy.sizes(), gathered.sizes())
    assert [lazy.padding_of(i) for i in range(len(lazy))] == [gathered.padding_of(i) for i in range(len(lazy))]
    assert lazy == gathered and gathered == lazy and lazy == gathered.tolist()
    assert lazy._gathered is None  # nothing above copied the ids
    assert np.array_equal(lazy.ids, gathered.ids) and np.array_equal(lazy.bounds, gathered.bounds)
    assert (lazy.padding is None) == (gathered.padding is None)
    assert lazy.padding is None or np.array_equal(lazy.padding, gathered.padding)


@pytest.mark.parametrize("seed", range(20))
def test_reorder_reads_as_the_gathered_view(seed):
    rng = np.random.default_rng(seed)
    view = random_view(rng, padded=seed % 2 == 1)
    first = rng.integers(0, len(view), int(rng.integers(0, 30)))
    second = rng.integers(0, len(first), int(rng.integers(0, 30))) if len(first) else first
    assert_reads_as(reorder(view, first), view.gather(first))
    composed = reorder(reorder(view, first), second)
    assert composed.base is view and composed == view.gather(first).gather(second)
    assert_reads_as(composed, view.gather(first).gather(second))


def test_index_errors_and_inequality():
    view = BatchView(encode_ids(["a", "b", "c"]), [0, 2, 3])
    lazy = reorder(view, [1, 0])
    with pytest.raises(IndexError, match="out of range"):
        lazy[2]  # pylint: disable=pointless-statement
    with pytest.raises(IndexError, match="out of range"):
        lazy[-3]  # pylint: disable=pointless-statement
    assert lazy == [["c"], ["a", "b"]] and lazy != view and lazy != reorder(view, [0, 1])
    assert lazy == reorder(view, [1, 0]) and not isinstance(lazy, BatchView)  # a view's reading, not its type
    assert reorder(view, [0, 1]) == view and clip_batches(view, 3, 1) == [["a", "b"], ["c"], ["a", "b"]]


def test_epoch_plan_reads_the_rank_view_without_copying(tmp_path):
    ids = [f"utt{i:03d}" for i in range(30)]
    lengths = np.random.default_rng(0).integers(100, 1000, len(ids))
    (tmp_path / "idx2text").write_text("".join(f"{u} w {i}\n" for i, u in enumerate(ids)))
    (tmp_path / "idx2len").write_text("".join(f"{u} {n}\n" for u, n in zip(ids, lengths)))
    iterator = BlockIterator(dataset_type=SpeechTextDataset,
                             dataset_conf={"main_data": {"text": str(tmp_path / "idx2text")}},
                             data_len=str(tmp_path / "idx2len"), batch_len=2000, shuffle=True, batches_per_epoch=5,
                             ngpu=2, rank=1, world_size=2, engine="inline")
    tasks = iterator.epoch_tasks(2, 1)
    plan = tasks.batches
    assert isinstance(plan, OrderedView) and plan.base is iterator.planner.view
    assert [task.ids for task in tasks] == plan.base.gather(plan.order).tolist()[1:]
    assert plan._gathered is None
