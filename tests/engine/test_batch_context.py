"""speechiter.batch_context: one record for the batch being built, one accessor (NOTE [ Batch context ])."""
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

import speechiter
from speechiter.batch_context import current_batch
from speechiter.batch_memory import batch_empty, install_allocator
from speechiter.dataset.reader import DatasetReader
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.iterator.block import BlockIterator
from speechiter.seeding import seeded
from speechiter.sequence import Task, fetch

FIELDS = ("seed", "generator", "py_random", "np_random", "allocator", "reads", "expected_lengths")


def test_outside_a_batch_every_field_is_none():
    context = current_batch()
    assert current_batch() is context
    assert all(getattr(context, name) is None for name in FIELDS)
    assert repr(context) == "BatchContext()"


def test_seeded_sets_the_seed_and_generator_and_puts_the_previous_back():
    with seeded(11) as generator:
        assert current_batch().seed == 11 and current_batch().generator is generator is speechiter.rng()
        with seeded(12):
            assert current_batch().seed == 12
        assert current_batch().seed == 11 and speechiter.rng() is generator
    assert current_batch().seed is None and current_batch().generator is None


def test_each_thread_has_its_own_context():
    seen = []
    with seeded(1):
        install_allocator("arena")
        try:
            thread = threading.Thread(target=lambda: seen.append((current_batch().seed, current_batch().allocator)))
            thread.start()
            thread.join(10)
        finally:
            install_allocator(None)
    assert seen == [(None, None)]


class Recorder:
    """A stand-in Dataset whose batch is what its context held while it was built."""

    def get_batch(self, ids):
        context = current_batch()
        return {"seed": context.seed, "draw": float(speechiter.rng().random()),
                "expected": context.expected_lengths, "padded": batch_empty((2, 3), np.float32)}


def test_one_fetch_fills_the_context_from_the_task_and_the_reader():
    reader = DatasetReader(Recorder(), expected_lengths=("lengths", ["idx2wav_len"]))
    batch = fetch(reader(), Task(0, ["a"], seed=5))
    with seeded(5) as generator:
        draw = float(generator.random())
    assert batch["seed"] == 5 and batch["draw"] == draw and batch["expected"] == ("lengths", ["idx2wav_len"])
    assert all(getattr(current_batch(), name) is None for name in FIELDS)  # put back after the batch


def test_the_length_file_reaches_the_workers_through_the_reader(corpus, tmp_path):
    """The iterator gives its reader the lengths; it writes nothing into the dataset."""
    root = shutil.copytree(corpus, tmp_path / "c")
    iterator = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                             data_len=str(root / "idx2wav_len"), batch_len=16000 * 3, engine="inline", out_type="null")
    lengths, files = iterator.reader().expected_lengths
    assert files == [str(root / "idx2wav_len")] and len(lengths) == 20
    assert not hasattr(iterator.dataset, "expected_lengths")
    shutil.copy(root / "idx2wav_len", root / "idx2frames")  # not a waveform length file by its name
    frames = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                           data_len=str(root / "idx2frames"), batch_len=16000 * 3, engine="inline", out_type="null")
    assert frames.reader().expected_lengths is None


@pytest.mark.slow  # a process worker
@pytest.mark.timeout(60)
def test_a_process_worker_checks_the_length_file_it_got_with_the_reader(corpus, tmp_path):
    root = shutil.copytree(corpus, tmp_path / "c")
    lines = (root / "idx2wav_len").read_text().splitlines()
    uid, n = lines[3].split()
    (root / "idx2wav_len").write_text("\n".join(lines[:3] + [f"{uid} {int(n) + 160}"] + lines[4:]) + "\n")
    iterator = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
                             data_len=str(root / "idx2wav_len"), batch_len=16000 * 3, num_workers=1, out_type="null")
    try:
        with pytest.raises(Exception, match=rf"utterance {uid} .*decoded {n} samples, but .*says {int(n) + 160}"):
            for _ in iterator.build_loader(1):
                pass
    finally:
        iterator.close()


@pytest.mark.slow  # a fresh interpreter: what an import imports
@pytest.mark.timeout(60)
def test_the_batch_context_imports_nothing():
    code = ("import sys, speechiter.batch_context, speechiter.seeding, speechiter.batch_memory; "
            "print(sorted(m for m in sys.modules if m.startswith('speechiter.') and m not in "
            "('speechiter.batch_context', 'speechiter.seeding', 'speechiter.batch_memory')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
