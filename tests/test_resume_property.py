"""Save after k batches, resume in another loader (any engine and worker count): the same batches as
the uninterrupted run. Property-based (hypothesis) over (epoch, start_step, k, the settings of the run
that saves and of the run that resumes); issue 14, "Saved state".

Iterators persist across examples (their workers too, as in a training run), so the test stays fast;
a resume with 0 workers or threads may also use a new Iterator (as a new process would).
"""
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.dump import checksum
from speechiter.iterator.block import BlockIterator

SETTINGS = [  # (engine, num_workers, thread_type)
    ("inline", 0, "proc"), ("msequence", 0, "proc"), ("msequence", 1, "proc"), ("msequence", 2, "proc"),
    ("msequence", 1, "thread"), ("msequence", 2, "thread")]
EPOCHS = 3
EXAMPLES = 300


@pytest.fixture(scope="module")
def iterators(tmp_path_factory):
    from tests.conftest import _make_corpus
    root = _make_corpus(tmp_path_factory.mktemp("resume") / "corpus", num=24, min_sec=0.1, max_sec=0.6)
    made = {}

    def make(key, fresh=False):
        if fresh or key not in made:
            engine, workers, thread_type = key
            iterator = BlockIterator(
                dataset_type=SpeechTextDataset,
                dataset_conf={"main_data": {"feat": str(root / "idx2wav"), "text": str(root / "idx2text")},
                              "use_speed_perturb": True},
                data_len=str(root / "idx2wav_len"), batch_len=2.0 * 16000, seed=3, out_type="null",
                engine=engine, num_workers=workers, thread_type=thread_type)
            if fresh:
                return iterator
            made[key] = iterator
        return made[key]

    yield make
    for iterator in made.values():
        iterator.close()


@pytest.fixture(scope="module")
def reference(iterators):
    """The uninterrupted run's checksums, per epoch."""
    iterator = iterators(SETTINGS[0])
    return {epoch: [checksum(b) for b in iterator.build_loader(epoch)] for epoch in range(1, EPOCHS + 1)}


@pytest.mark.timeout(300)
def test_save_and_resume_gives_the_uninterrupted_batches(iterators, reference):
    cases = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(epoch=st.integers(1, EPOCHS), start=st.integers(0, 40), taken=st.integers(0, 40),
           saver=st.sampled_from(SETTINGS), resumer=st.sampled_from(SETTINGS), fresh=st.booleans())
    def trial(epoch, start, taken, saver, resumer, fresh):
        expected = reference[epoch]
        start = min(start, len(expected))
        fresh = fresh and (resumer[1] == 0 or resumer[2] == "thread")  # a new Iterator, as in a new process
        cases.append((epoch, start, taken, saver, resumer, fresh))
        loader = iterators(saver).build_loader(epoch, start)
        got = [checksum(batch) for batch in itertools.islice(loader, taken)]  # stop before asking for more
        state = loader.state_dict()
        del loader  # an abandoned epoch, as a process that saved and then died
        resuming = iterators(resumer, fresh)
        try:
            resumed = resuming.build_loader()
            resumed.load_state_dict(state)
            got += [checksum(b) for b in resumed]
        finally:
            if fresh:
                resuming.close()
        assert got == expected[start:], (epoch, start, taken, saver, resumer, fresh)

    trial()
    assert len(cases) == EXAMPLES
