"""Save after k batches, resume in another loader (any engine and worker count): the same batches as
the uninterrupted run. Property-based (hypothesis) over (epoch, start_step, k, the settings of the run
that saves and of the run that resumes), for one Iterator's Loader and for groups (GroupLoader: any
iterators of any lengths, ``steps: shortest`` or ``longest``); handbook "Resuming".

Iterators persist across examples (their workers too, as in a training run), so the test stays fast;
a resume with 0 workers or threads may also use a new Iterator (as a new process would).
"""
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.dump import checksum
from speechiter.group import GroupLoader
from speechiter.iterator.abs import Iterator
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


@pytest.mark.slow
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


#: group members: name -> (batch_size, batches_per_epoch) over 24 utterances: 1, 3, 5, 12, 4 and 7 steps
MEMBERS = {"a": (24, None), "b": (9, None), "c": (5, None), "d": (2, None), "e": (2, 4), "f": (3, 7)}
GROUP_SETTINGS = [("inline", 0, "proc"), ("msequence", 1, "thread")]


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    """``{(name, settings): Iterator}`` for every group member and engine setting."""
    from tests.conftest import _make_corpus
    root = _make_corpus(tmp_path_factory.mktemp("groups") / "corpus", num=24, min_sec=0.1, max_sec=0.3)
    made = {(name, key): Iterator(
        dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
        batch_size=size, batches_per_epoch=per_epoch, seed=5, out_type="null", name=f"train/{name}",
        engine=key[0], num_workers=key[1], thread_type=key[2])
        for name, (size, per_epoch) in MEMBERS.items() for key in GROUP_SETTINGS}
    assert [len(made[name, GROUP_SETTINGS[0]]) for name in MEMBERS] == [1, 3, 5, 12, 4, 7]
    yield made
    for iterator in made.values():
        iterator.close()


def group_batches(loader):
    return [{name: (batch.ids, checksum(batch)) for name, batch in step.items()} for step in loader]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_group_saved_at_any_step_resumes_to_the_same_remaining_batches(members):
    references, cases = {}, []

    @settings(max_examples=150, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(names=st.lists(st.sampled_from(sorted(MEMBERS)), min_size=1, max_size=3, unique=True),
           policy=st.sampled_from(["shortest", "longest"]), epoch=st.integers(1, 4), taken=st.integers(0, 12),
           saver=st.sampled_from(GROUP_SETTINGS), resumer=st.sampled_from(GROUP_SETTINGS))
    def trial(names, policy, epoch, taken, saver, resumer):
        def group(key):
            return {name: members[name, key] for name in names}

        if (tuple(names), policy, epoch) not in references:
            references[tuple(names), policy, epoch] = group_batches(GroupLoader(group(GROUP_SETTINGS[0]), epoch,
                                                                                steps=policy))
        expected = references[tuple(names), policy, epoch]
        taken = min(taken, len(expected))
        cases.append((names, policy, epoch, taken))
        loader = GroupLoader(group(saver), epoch, steps=policy)
        got = group_batches(itertools.islice(loader, taken))
        state = json.loads(json.dumps(loader.state_dict()))
        del loader  # an abandoned epoch
        resumed = GroupLoader(group(resumer), steps=policy)
        resumed.load_state_dict(state)
        assert (resumed.epoch, resumed.step) == (epoch, taken)
        assert got + group_batches(resumed) == expected, (names, policy, epoch, taken, saver, resumer)

    trial()
    assert len(cases) == 150
    assert {len(names) for names, *_ in cases} == {1, 2, 3} and {policy for _, policy, *_ in cases} == {
        "shortest", "longest"}
