"""Elastic resume in one process (explicit rank and world_size): a state saved on one layout (ranks, ngpu)
continues on another with the saved run's global batches (NOTE [ Elastic resume ] in
speechiter/iterator/elastic.py)."""
import json
import warnings

import numpy as np
import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError
from speechiter.fingerprints import batches_fingerprint, view_fingerprint
from speechiter.group import GroupLoader, IteratorGroup
from speechiter.iterator.abs import Iterator
from speechiter.iterator.block import BlockIterator
from speechiter.iterator.bucket import BucketIterator
from speechiter.plan.layout import Layout
from speechiter.state import RunState
from speechiter.state_files import earliest, saved_states
from speechiter.state_versions import LAYOUT
from tests.state.old_forms import loader_state

EPOCH = 2


@pytest.fixture
def text_corpus(tmp_path):
    """61 utterances of text with lengths 100..999 (no audio: planning and loading are quick)."""
    rng = np.random.default_rng(7)
    ids = [f"utt{i:03d}" for i in range(61)]
    (tmp_path / "idx2text").write_text("".join(f"{u} words {i}\n" for i, u in enumerate(ids)))
    (tmp_path / "idx2len").write_text("".join(f"{u} {n}\n" for u, n in zip(ids, rng.integers(100, 1000, len(ids)))))
    return tmp_path


def make(root, rank=0, world_size=1, cls=BlockIterator, idx2text="idx2text", **conf):
    conf = {"batch_len": 2500, **conf} if cls is not Iterator else {"batch_size": 3, **conf}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ngpu != world size is part of what is tested
        return cls(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(root / idx2text)}},
                   data_len=str(root / "idx2len"), engine="inline", num_workers=0, rank=rank, world_size=world_size,
                   seed=3, name="train", **conf)


def saved_at(root, step, world_size, epoch=EPOCH, **conf):
    """Rank 0's state of a ``world_size``-rank run after ``step`` steps of ``epoch``, and that run's plans."""
    ranks = [make(root, r, world_size, **conf) for r in range(world_size)]
    state = ranks[0].build_loader(epoch, step).state_dict()
    return state, [it.epoch_batches(epoch) for it in ranks]


def resumed(root, state, world_size, **conf):
    """The rest of the epoch on each rank of a ``world_size``-rank run that loads ``state``."""
    loaders = []
    for rank in range(world_size):
        loader = make(root, rank, world_size, **conf).build_loader()
        loader.load_state_dict(state)
        loaders.append(loader)
    return loaders


def check_union(before, after, step, reference, once=True):
    """Steps 1..step from ``before`` (plans per rank), the rest from ``after`` (loaders): each step's union
    over the ranks is the reference's global batch, and (``once``) every utterance of the epoch comes in
    one step."""
    steps = [set().union(*(plan[i] for plan in before)) for i in range(step)]
    rest = [[task.ids for task in loader.tasks] for loader in after]
    assert len({len(plan) for plan in rest}) == 1  # every rank runs the same steps
    steps += [set().union(*(plan[i] for plan in rest)) for i in range(len(rest[0]))]
    assert steps == [set(batch) for batch in reference]
    seen = [uid for batch in steps for uid in batch]
    assert len(seen) == len(set(seen)) or not once


@pytest.mark.parametrize("old, new", [(4, 2), (4, 3), (2, 4), (3, 1)])
def test_a_state_of_w_ranks_continues_on_w_prime_with_the_saved_global_batches(text_corpus, old, new):
    reference = make(text_corpus).epoch_batches(EPOCH)
    step = len(reference) // 3
    state, plans = saved_at(text_corpus, step, old)
    assert state["layout"] == {"ngpu": 1, "world_size": old} and state["version"] == 5
    loaders = resumed(text_corpus, state, new)
    check_union(plans, loaders, step, reference)
    # the next epoch is a fresh run's of the new layout; a state saved in the continued epoch keeps the old one
    fresh = [make(text_corpus, r, new) for r in range(new)]
    for rank, loader in enumerate(loaders):
        assert loader.iterator.epoch_batches(EPOCH + 1) == fresh[rank].epoch_batches(EPOCH + 1)
        assert loader.state_dict()["layout"] == {"ngpu": 1, "world_size": old}
        following = GroupLoader(loader.iterator, EPOCH + 1).state_dict()["iterators"]["None"]
        assert following["layout"] == {"ngpu": 1, "world_size": new}


def test_the_same_layout_is_todays_resume_bit_for_bit(text_corpus):
    state, plans = saved_at(text_corpus, 5, 2)
    loaders = resumed(text_corpus, state, 2)
    for plan, loader in zip(plans, loaders):
        assert loader.iterator.planner.continued is None
        assert [task.ids for task in loader.tasks] == plan[5:]


def test_a_changed_ngpu_keeps_the_saved_number_of_batches_in_the_epoch(text_corpus):
    reference = make(text_corpus, ngpu=2).epoch_batches(EPOCH)  # the global batches under ngpu 2
    assert len(reference) != len(make(text_corpus))  # the ngpu rule moved the cuts
    state, plans = saved_at(text_corpus, 4, 2, ngpu=2)
    loaders = resumed(text_corpus, state, 3)
    assert len(loaders[0].iterator) != loaders[0].iterator.epoch_len(EPOCH) == len(reference)
    check_union(plans, loaders, 4, reference)
    group = GroupLoader(make(text_corpus, 1, 3))
    group.load_state_dict(GroupLoader(make(text_corpus, ngpu=2), EPOCH, 4).state_dict())
    assert group.steps == len(reference) and len(group) == len(reference) - 4


def test_bucket_and_abs_iterators_continue_too(text_corpus):
    for conf in ({"cls": BucketIterator, "batch_len": 3000}, {"cls": Iterator, "batch_size": 5}):
        reference = make(text_corpus, **conf).epoch_batches(EPOCH)
        state, plans = saved_at(text_corpus, 3, 3, **conf)
        check_union(plans, resumed(text_corpus, state, 2, **conf), 3, reference)


def test_evaluation_shares_mark_their_repeats_as_padding(text_corpus):
    conf = {"evaluation": True, "shuffle": False, "cls": Iterator, "batch_size": 1}
    global_batches = [[] for _ in range(len(make(text_corpus, 0, 3, **conf)))]  # merged into batches of 3
    for rank in range(3):
        plan = make(text_corpus, rank, 3, **conf).epoch_tasks(1).batches
        for i in range(len(plan)):
            global_batches[i] += [uid for uid, pad in zip(plan[i], plan.padding_of(i)) if not pad]
    state = make(text_corpus, 0, 3, **conf).build_loader(1, 5).state_dict()
    real = []
    for rank in range(4):  # 4 ranks share batches of 3: one share of each is a marked repeat
        loader = make(text_corpus, rank, 4, **conf).build_loader()
        loader.load_state_dict(state)
        for batch, ids in zip(loader, global_batches[5:]):
            assert set(batch.ids) <= set(ids) and len(batch.is_padding) == len(batch.ids) == 1
            assert batch.is_padding == [rank == 0 or len(ids) < 4 - rank]  # descending: rank 0's share is empty
            real += [uid for uid, pad in zip(batch.ids, batch.is_padding) if not pad]
    assert sorted(real) == sorted(uid for ids in global_batches[5:] for uid in ids)


def test_a_version_3_state_loads_on_its_own_layout_only(text_corpus):
    saved = make(text_corpus, 1, 2)
    legacy = loader_state(saved, EPOCH, 4, version=3)
    assert "layout" not in legacy and legacy["config"] == saved.configuration(LAYOUT)[0]
    same = make(text_corpus, 1, 2).build_loader()
    same.load_state_dict(legacy)
    assert [task.ids for task in same.tasks] == saved.epoch_batches(EPOCH)[4:]
    with pytest.raises(ConfigError, match=r"^state: the state was saved with a different setup \(configuration: "
                                          r"world_size: saved 2, now 3\)$"):
        make(text_corpus, 1, 3).build_loader().load_state_dict(legacy)


def test_a_changed_corpus_or_batching_option_is_refused(text_corpus):
    state, _ = saved_at(text_corpus, 3, 2)
    lines = (text_corpus / "idx2text").read_text().splitlines()
    (text_corpus / "fewer").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ConfigError, match=r"^state: the state was saved with a different setup \(configuration: "
                                          r"dataset_conf.main_data.text: saved .*idx2text\", now .*fewer\"\)$"):
        make(text_corpus, 0, 3, idx2text="fewer").build_loader().load_state_dict(state)
    (text_corpus / "idx2text").write_text("\n".join(lines[:-1]) + "\n")  # the same file, one utterance fewer
    with pytest.raises(ConfigError, match=r"^state: the state was saved with a different setup \(batching view: "
                                          r"saved '[0-9a-f]+', now '[0-9a-f]+'\)$"):
        make(text_corpus, 0, 3).build_loader().load_state_dict(state)
    with pytest.raises(ConfigError, match=r"\(configuration: batch_len: saved 2500, now 2000; "
                                          r"number of batches: saved \d+, now \d+\)$"):
        make(text_corpus, 0, 3, batch_len=2000).build_loader().load_state_dict(state)


def test_a_view_that_depends_on_ngpu_says_so(text_corpus):
    """The abs Iterator's default batch_size is ngpu: another ngpu makes other batches."""
    state, _ = saved_at(text_corpus, 3, 2, cls=Iterator, batch_size=None, ngpu=2)
    with pytest.raises(ConfigError, match=r"; the batching rule depends on ngpu, saved 2, now 1\)$"):
        make(text_corpus, cls=Iterator, batch_size=None).build_loader().load_state_dict(state)


def test_an_own_epoch_view_resumes_on_its_layout_only(text_corpus):
    class OwnView(BlockIterator):
        def epoch_view(self, epoch):
            return self.batches

    state, _ = saved_at(text_corpus, 3, 2, cls=OwnView)
    loader = make(text_corpus, 0, 2, cls=OwnView).build_loader()
    loader.load_state_dict(state)  # the same layout: no global batches needed
    with pytest.raises(ConfigError, match=r"^state.layout: train: OwnView has its own epoch_view, so its state "
                                          r"resumes on the layout it was saved with \(2 ranks, ngpu 1\), "
                                          r"not on 3 ranks, ngpu 1$"):
        make(text_corpus, 0, 3, cls=OwnView).build_loader().load_state_dict(state)


def test_a_semi_supervised_group_continues_on_another_layout(text_corpus):
    def group(rank, world_size, steps="shortest", **conf):
        return IteratorGroup({"sup": make(text_corpus, rank, world_size, cls=Iterator, batch_size=2, **conf),
                              "unsup": make(text_corpus, rank, world_size, **conf)}, steps)

    saved = GroupLoader(group(0, 4), EPOCH, 3).state_dict()
    assert {s["layout"]["world_size"] for s in saved["iterators"].values()} == {4}
    references = {name: it.epoch_batches(EPOCH) for name, it in group(0, 1).items()}
    rests = []
    for rank in range(3):
        loader = GroupLoader(group(rank, 3))
        loader.load_state_dict(saved)
        rests.append([{name: batch.ids for name, batch in step.items()} for step in loader])
    for name, reference in references.items():
        for offset, batch in enumerate(reference[3:min(len(b) for b in references.values())]):
            assert set().union(*(rest[offset][name] for rest in rests)) == set(batch)


def test_longest_refuses_a_layout_that_changes_an_epochs_length(text_corpus):
    def group(ngpu):
        return IteratorGroup({"sup": make(text_corpus, cls=Iterator, batch_size=2, ngpu=ngpu),
                              "unsup": make(text_corpus, ngpu=ngpu)}, "longest")

    saved = GroupLoader(group(2), EPOCH, 3).state_dict()
    loader = GroupLoader(group(1))
    with pytest.raises(ConfigError, match=r"^state.iterators.unsup.layout: steps: longest cannot continue epoch \d+ "
                                          r"of unsup on a layout that changes its length: \d+ batches under 1 rank, "
                                          r"ngpu 2, \d+ under 1 rank, ngpu 1$"):
        loader.load_state_dict(saved)
    assert all(it.planner.continued is None for it in loader.iterators.values())  # nothing is left half loaded
    same_lengths = GroupLoader(group(2))
    same_lengths.load_state_dict(saved)


def test_cli_state_files_resume_from_the_earliest_rank(tmp_path):
    def write(rank, step, world_size=3):
        train = {"version": 4, "epoch": 2, "step": step, "steps": "shortest", "iterators": {}}
        state = {"version": 4, "mode": "train", "seed": 0, "config": "c", "train": train, "settings": None,
                 "world_size": world_size}
        (tmp_path / f"state.rank{rank}.json").write_text(json.dumps(state))

    for rank, step in enumerate((7, 5, 9)):
        write(rank, step)
    write(3, 1, world_size=4)  # a stale file of an earlier, larger run
    path = str(tmp_path / "state.json")
    states = saved_states(path, 1, distributed=True)
    assert [source[-10:] for source, _ in states] == ["rank0.json", "rank1.json", "rank2.json"]
    assert earliest(states)[0].endswith("state.rank1.json") and earliest(states)[1].step == 5
    assert all(isinstance(state, RunState) for _, state in states)
    (tmp_path / "state.rank2.json").unlink()
    with pytest.raises(ConfigError, match=r"^--resume: .*state.rank2.json is missing: the run that wrote "
                                          r".*state.rank0.json had 3 ranks, each with its own state file$"):
        saved_states(path, 0, distributed=True)
    write(2, 4, world_size=4)  # files of two runs (NOTE [ First state files ] in state_files.py)
    assert earliest(saved_states(path, 0, distributed=True))[1].step == 4
    write(2, 4, world_size=2)  # a run of 2 ranks has no rank 2: a file renamed or of another run
    with pytest.raises(ConfigError, match=r"state.rank2.json was saved by a run of 2 ranks, which has no rank 2"):
        saved_states(path, 0, distributed=True)


def test_layout_strings_and_round_trip():
    assert str(Layout(2, 1)) == "1 rank, ngpu 2" and Layout.from_dict({"ngpu": 2, "world_size": 1}, "x") == Layout(2)


def test_the_view_fingerprint_of_version_4_is_pinned_and_width_free():
    ids = np.array([b"a", b"bb", b"ccc"])
    assert batches_fingerprint(ids, [0, 1, 3]) == batches_fingerprint(ids.astype("S10"), [0, 1, 3]) \
        == "3b9fccd171a83eec"
    assert batches_fingerprint(ids, [0, 2, 3]) != batches_fingerprint(ids, [0, 1, 3])
    assert view_fingerprint([["a"], ["bb", "ccc"]]) == "10f959ed744b5874"  # versions 1 to 3: as before


def make_mix(root, rank=0, world_size=1):
    """A 0.6/0.4 mix of two block corpora (the second of the utterances with an even index)."""
    from speechiter.iterator.mix import MixIterator
    lines = (root / "idx2text").read_text().splitlines()
    (root / "idx2text_even").write_text("".join(line + "\n" for line in lines[::2]))
    corpora = {"a": make(root, rank, world_size), "b": make(root, rank, world_size, idx2text="idx2text_even")}
    return MixIterator(corpora, weights={"a": 0.6, "b": 0.4}, batches_per_epoch=25, seed=3, engine="inline",
                       num_workers=0, name="train")


@pytest.mark.parametrize("old, new", [(4, 2), (2, 3)])
def test_a_mix_continues_each_corpus_epoch_on_another_number_of_ranks(text_corpus, old, new):
    reference = make_mix(text_corpus).epoch_batches(EPOCH)
    step = 11
    ranks = [make_mix(text_corpus, r, old) for r in range(old)]
    state = ranks[0].build_loader(EPOCH, step).state_dict()
    assert {s["layout"]["world_size"] for s in state["sources"].values()} == {old}
    loaders = []
    for rank in range(new):
        loader = make_mix(text_corpus, rank, new).build_loader()
        loader.load_state_dict(state)
        loaders.append(loader)
    # a mixed epoch walks through several epochs of each corpus, and the corpora share utterances
    check_union([it.epoch_batches(EPOCH) for it in ranks], loaders, step, reference, once=False)
    # the corpora's epochs begun before the save keep the saved layout; a state saved now says so
    assert {s["layout"]["world_size"] for s in loaders[0].state_dict()["sources"].values()} == {old}
