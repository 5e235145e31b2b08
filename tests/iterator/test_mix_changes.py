"""A mix's state resumed under a changed mix (NOTE [ Changed mix ] in speechiter/iterator/mix_changes.py): other
weights, an added or removed corpus, another batches_per_epoch. Property-based (hypothesis) over mixes of 1 to
4 corpora, the save step and the change: each kept corpus's interrupted epoch comes exactly once across the
batches before the save and after the resume; the new weights' shares hold in every window from the resume
step on; a second resume of the resumed run is exact. Text corpora made once per module, the inline engine."""
import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.dump import checksum
from speechiter.errors import ConfigError
from speechiter.group import GroupLoader
from speechiter.iterator.abs import Iterator
from speechiter.iterator.mix import MixIterator

#: name -> (utterances, batch_size, its own batches_per_epoch): 5, 3, 5, 4 and 3 batches per own epoch
CORPORA = {"c0": (9, 2, None), "c1": (7, 3, None), "c2": (5, 1, None), "c3": (11, 2, 4), "c4": (6, 2, None)}
NAMES = list(CORPORA)
EXAMPLES = 40


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Small text corpora (ids ``c0u00`` ...): ``<name>.text`` and ``<name>.len``."""
    root = tmp_path_factory.mktemp("changes")
    for name, (num, _, _) in CORPORA.items():
        ids = [f"{name}u{i:02d}" for i in range(num)]
        (root / f"{name}.text").write_text("".join(f"{uid} words of {uid}\n" for uid in ids))
        (root / f"{name}.len").write_text("".join(f"{uid} {10 + 7 * i % 13}\n" for i, uid in enumerate(ids)))
    return root


def text_iterator(root, name, batch_size, batches_per_epoch=None):
    return Iterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"text": str(root / f"{name}.text")}},
                    data_len=str(root / f"{name}.len"), batch_size=batch_size, batches_per_epoch=batches_per_epoch,
                    seed=5, out_type="null", engine="inline", num_workers=0, name=f"train/{name}")


@pytest.fixture(scope="module")
def corpora(root):
    """``{name: Iterator}``, shared by every mix of the module."""
    made = {name: text_iterator(root, name, batch_size, per_epoch)
            for name, (_, batch_size, per_epoch) in CORPORA.items()}
    yield made
    for iterator in made.values():
        iterator.close()


def make_mix(corpora, weights, batches_per_epoch, name="train"):
    return MixIterator({corpus: corpora[corpus] for corpus in weights}, weights, batches_per_epoch=batches_per_epoch,
                       seed=5, engine="inline", num_workers=0, out_type="null", name=name)


def steps_from(loader, mix, count):
    """``count`` steps from where ``loader`` stands, on through the mix's next epochs: ``[(source, ids,
    checksum)]``, and the state after each (``states[i]``: after ``i + 1`` steps)."""
    got, states = [], []
    while len(got) < count:
        for batch in loader:
            got.append((batch.source, batch.ids, checksum(batch)))
            states.append(loader.state_dict())
            if len(got) == count:
                break
        else:
            loader = mix.build_loader(loader.epoch + 1, prefetch_next=False)
    return got, states


def run_until(mix, epoch, step):
    """The batches of ``mix`` from its first step to step ``step`` of ``epoch``, and the state there."""
    batches = []
    for number in range(1, epoch + 1):
        loader = mix.build_loader(number, prefetch_next=False, stop_step=None if number < epoch else step)
        batches += [(batch.source, batch.ids, checksum(batch)) for batch in loader]
    return batches, json.loads(json.dumps(loader.state_dict()))


def own_batches(batches, corpus):
    return [ids for source, ids, _ in batches if source == corpus]


def depth(corpora: int) -> int:
    """The schedule tree's depth: a corpus's share of any window is within this many batches."""
    return max(1, math.ceil(math.log2(corpora))) if corpora > 1 else 1


def windows_hold(sources, weights) -> bool:
    """Every window of ``sources`` holds each corpus's share of ``weights`` within the tree's depth."""
    total = sum(weights.values())
    for name, weight in weights.items():
        counts = np.concatenate([[0], np.cumsum([source == name for source in sources])])
        spans = np.arange(len(sources) + 1)
        got = counts[None, :] - counts[:, None]
        expected = (spans[None, :] - spans[:, None]) * weight / total
        upper = np.triu(np.ones_like(got, dtype=bool))
        if (np.abs(got - expected)[upper] >= depth(len(weights))).any():
            return False
    return True


@st.composite
def changes(draw):
    """(old weights, old batches_per_epoch, save epoch, save step, new weights, new batches_per_epoch)."""
    old = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    old_weights = {name: draw(st.integers(0, 4)) for name in old}
    old_weights[old[0]] = old_weights[old[0]] or 1
    old_len = draw(st.integers(2, 12))
    epoch, step = draw(st.integers(1, 3)), draw(st.integers(0, old_len))
    kinds = draw(st.sets(st.sampled_from(["weights", "add", "remove", "batches_per_epoch"]), min_size=1))
    new = list(old)
    if "remove" in kinds and len(new) > 1:
        new.remove(draw(st.sampled_from(new)))
    if "add" in kinds and len(new) < 4:
        new.append(draw(st.sampled_from([name for name in NAMES if name not in new])))
    new_weights = {name: old_weights.get(name, 1) for name in new}
    if "weights" in kinds:
        new_weights = {name: draw(st.integers(0, 4)) for name in new}
    new_weights[new[0]] = new_weights[new[0]] or 1
    new_len = draw(st.integers(2, 12)) if "batches_per_epoch" in kinds else old_len
    return old_weights, old_len, epoch, step, new_weights, new_len


def check_change(corpora, old_weights, old_len, epoch, step, new_weights, new_len):
    sizes = {name: len(corpora[name]) for name in CORPORA}
    before, state = run_until(make_mix(corpora, old_weights, old_len), epoch, step)
    mix = make_mix(corpora, new_weights, new_len)
    loader = mix.build_loader(prefetch_next=False)
    loader.load_state_dict(state, allow_changes=["mix"])
    # enough steps for every corpus to end its interrupted epoch (a share of 1/13 or more, within 2 batches)
    after, states = steps_from(loader, mix, 13 * (max(sizes.values()) + 2))
    for name, weight in new_weights.items():
        saved = state["sources"].get(name, {"epoch": 1, "step": 0})
        own = corpora[name].epoch_batches(saved["epoch"]).tolist()
        seen = own_batches(before, name)[len(own_batches(before, name)) - saved["step"]:] if name in old_weights \
            else []
        if weight:  # the rest of its interrupted epoch, in order, then its next epochs
            left = sizes[name] - saved["step"]
            seen += own_batches(after, name)[:left]
            assert seen == own, (name, saved)
            rest = own_batches(after, name)[left:]
            stream = [ids for more in range(1, 2 + len(rest) // sizes[name])
                      for ids in corpora[name].epoch_batches(saved["epoch"] + more)]
            assert rest == stream[:len(rest)], name
        else:
            assert not own_batches(after, name)
    assert windows_hold([source for source, _, _ in after], new_weights)
    # a second resume of the resumed run, in a new mix of the same setup, is exact
    second = len(after) // 3
    again = make_mix(corpora, new_weights, new_len)
    resumed = again.build_loader(prefetch_next=False)
    resumed.load_state_dict(json.loads(json.dumps(states[second - 1])))
    assert steps_from(resumed, again, len(after) - second)[0] == after[second:]
    for made in (mix, again):
        made.close()


@pytest.mark.timeout(300)
def test_a_changed_mix_finishes_each_interrupted_epoch_once_and_holds_its_new_shares(corpora):
    cases = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(change=changes())
    def trial(change):
        cases.append(change)
        check_change(corpora, *change)

    trial()
    assert len(cases) == EXAMPLES


def test_the_resumed_state_records_where_the_schedule_started(corpora):
    before, state = run_until(make_mix(corpora, {"c0": 0.7, "c1": 0.3}, 9), 2, 3)
    mix = make_mix(corpora, {"c0": 1, "c2": 1}, 6)
    loader = mix.build_loader()
    loader.load_state_dict(state, allow_changes="mix")
    own = state["sources"]["c0"]
    assert loader.resume_notes == [
        'train: the mix changed (batches_per_epoch: saved 9, now 6; weights.c0: saved "7/10", now "1/2"; added c2; '
        'removed c1); its new schedule starts after step 3 of epoch 2, which keeps its 9 steps (the next epochs '
        'have 6)',
        f"train/c0: continues its epoch {own['epoch']} at step {own['step']} of 5",
        "train/c2: added, starts at its epoch 1",
        f"train/c1: removed (was at its epoch {state['sources']['c1']['epoch']} step {state['sources']['c1']['step']})"]
    assert len(loader) == 6 and mix.epoch_len(2) == 9 and mix.epoch_len(3) == 6
    saved = loader.state_dict()
    assert saved["version"] == 5 and saved["schedule_start"] == {
        "epoch": 2, "step": 3, "epoch_steps": 9, "counts": {"c0": (own["epoch"] - 1) * 5 + own["step"], "c2": 0}}
    assert set(saved["sources"]) == {"c0", "c2"} and "schedule_start" not in state  # a mix never changed has none
    for bad, message in [((2, 2), r"^build_loader: the mix's schedule started after epoch 2 step 3 \(a resume "
                                   r"under a changed mix\), so its earlier steps cannot be planned: got epoch 2 "
                                   r"step 3$"),
                         ((1, 0), r"^build_loader: .* got epoch 1 step 1$"),
                         ((1, 5), r"^build_loader: .* got epoch 1 step 6$")]:
        early = mix.build_loader(*bad, prefetch_next=False)  # a loader may be built there, to load a state
        with pytest.raises(ConfigError, match=message):
            next(iter(early))
    with pytest.raises(ConfigError, match=r"^build_loader: .* got epoch 2 step 1$"):
        mix.epoch_batches(2)
    with pytest.raises(ConfigError, match=r"^state: .* got epoch 2 step 2$"):
        mix.state_at(2, 2)
    with pytest.raises(ConfigError, match=r"^source_of: .* got epoch 2 step 3$"):
        mix.source_of(2, 3)
    assert mix.source_of(2, 4) in ("c0", "c2")
    assert mix.planner.plan(2).sizes()[:3].tolist() == [0, 0, 0]  # an earlier schedule's steps count nothing
    assert (mix.planner.plan(2).sizes()[3:] > 0).all() and not mix.planner.plan(1).sizes().any()
    mix.close()


def test_two_changes_in_a_row_each_continue_from_their_resume_point(corpora):
    before, state = run_until(make_mix(corpora, {"c0": 1, "c1": 1}, 7), 1, 5)
    first = make_mix(corpora, {"c0": 1, "c1": 3}, 7)
    loader = first.build_loader()
    loader.load_state_dict(state, allow_changes=["mix"])
    middle, states = steps_from(loader, first, 9)  # to the end of epoch 2
    second = make_mix(corpora, {"c1": 1, "c4": 1}, 4)
    ended = second.build_loader()
    ended.load_state_dict(states[-1], allow_changes=["mix"])  # after its last step: the epoch keeps its 7
    assert (ended.epoch, ended.step, len(ended), second.epoch_len(2), second.epoch_len(3)) == (2, 7, 0, 7, 4)
    again = second.build_loader()
    again.load_state_dict(first.state_at(3, 0).to_dict(), allow_changes=["mix"])  # at an epoch's start: the new 4
    assert (again.epoch, again.step, len(again), second.epoch_len(3)) == (3, 0, 4, 4)
    assert "its new schedule starts after step 0 of epoch 3" in again.resume_notes[0]
    after, _ = steps_from(again, second, 30)
    c1 = own_batches(before + middle + after, "c1")
    stream = [ids for epoch in (1, 2, 3) for ids in corpora["c1"].epoch_batches(epoch)]
    assert c1[:9] == stream  # its stream of epochs, whole, across both changes
    assert own_batches(after, "c4")[:3] == corpora["c4"].epoch_batches(1).tolist()
    for made in (first, second):
        made.close()


def test_a_changed_mix_is_refused_without_the_opt_in_saying_what_changed(corpora):
    _, state = run_until(make_mix(corpora, {"c0": 0.7, "c1": 0.3}, 9), 1, 4)
    mix = make_mix(corpora, {"c0": 0.6, "c1": 0.4}, 9)
    with pytest.raises(ConfigError, match=r"^state: the state was saved with a different setup \(weights.c0: saved "
                                          r"\"7/10\", now \"3/5\"; weights.c1: saved \"3/10\", now \"2/5\"\); a "
                                          r"changed mix resumes when allowed: --resume_changes mix \(Python: "
                                          r"load_state_dict\(state, allow_changes=\['mix'\]\)\)$"):
        mix.build_loader().load_state_dict(state)
    with pytest.raises(ConfigError, match=r"^allow_changes: expected some of mix, got 'weights'$"):
        mix.build_loader().load_state_dict(state, allow_changes=["weights"])
    with pytest.raises(ConfigError, match=r"^allow_changes: expected some of mix, got 3$"):
        mix.build_loader().load_state_dict(state, allow_changes=3)
    mix.close()


def test_a_change_of_a_kept_corpus_or_the_seed_is_no_mix_change(corpora, root):
    _, state = run_until(make_mix(corpora, {"c0": 0.7, "c1": 0.3}, 9), 1, 4)
    other = text_iterator(root, "c1", batch_size=1)
    mix = MixIterator({"c0": corpora["c0"], "c1": other}, {"c0": 1, "c1": 1}, batches_per_epoch=9, seed=5,
                      engine="inline", num_workers=0, name="train")
    with pytest.raises(ConfigError, match=r"^state: the state was saved with a different setup \(.*iterators.c1.batch_"
                                          r"size: saved 3, now 1") as refused:
        mix.build_loader().load_state_dict(state, allow_changes=["mix"])
    assert "--resume_changes" not in str(refused.value)
    reseeded = MixIterator({"c0": corpora["c0"]}, {"c0": 1}, batches_per_epoch=9, seed=6, engine="inline",
                           num_workers=0, name="train")
    with pytest.raises(ConfigError, match=r"seed: saved 5, now 6"):
        reseeded.build_loader().load_state_dict(state, allow_changes=["mix"])
    for made in (mix, reseeded, other):
        made.close()


def test_a_saved_schedule_start_is_checked(corpora):
    mix = make_mix(corpora, {"c0": 1, "c1": 1}, 6)
    _, state = run_until(make_mix(corpora, {"c0": 0.7, "c1": 0.3}, 9), 2, 3)
    loader = mix.build_loader()
    loader.load_state_dict(state, allow_changes=["mix"])
    saved = loader.state_dict()
    cases = [({"schedule_start": dict(saved["schedule_start"], counts={"c0": 1})},
              r"^state.schedule_start.counts: counts corpora \['c0'\], the state's sources are \['c0', 'c1'\]$"),
             ({"schedule_start": dict(saved["schedule_start"], step=3, epoch=3)},
              r"^state.schedule_start: the schedule starts at epoch 3 step 3, after the state's epoch 2 step 3$"),
             ({"schedule_start": dict(saved["schedule_start"], step=10)},
              r"^state.schedule_start.step: epoch 2 has 9 steps, got step 10$"),
             ({"schedule_start": [2, 3]}, r"^state.schedule_start: expected \{epoch, step, epoch_steps, counts\}"),
             ({"schedule_start": dict(saved["schedule_start"], counts=[1])},
              r"^state.schedule_start.counts: expected \{corpus: batches\}, got \[1\]$"),
             ({"schedule_start": dict(saved["schedule_start"], counts={"c0": -1, "c1": 0})},
              r"^state.schedule_start.counts.c0: expected a non-negative integer, got -1$"),
             ({"version": 4}, r"^state: unknown keys schedule_start; a loader state has"),
             ({"schedule_start": dict(saved["schedule_start"], counts={"c0": 0, "c1": 0})},
              r"^state.sources.c0: at epoch \d step \d, but the mix's epoch 2 step 3 puts it at epoch 1 step 0$")]
    for change, message in cases:
        with pytest.raises(ConfigError, match=message):
            mix.build_loader().load_state_dict({**saved, **change})
    unsaid = {key: value for key, value in state.items() if key != "settings"}  # an older or edited summary
    with pytest.raises(ConfigError, match=r"^state.settings: does not say the saved mix's schedule \(batches_per_"
                                          r"epoch and weights\), so the state cannot resume under a changed mix$"):
        mix.build_loader().load_state_dict(unsaid, allow_changes=["mix"])
    lone = dict(saved["sources"]["c0"], schedule_start=saved["schedule_start"])
    with pytest.raises(ConfigError, match=r"^state.schedule_start: only a mix's state \(with sources\) has one$"):
        corpora["c0"].build_loader().load_state_dict(lone)
    mix.close()


def test_a_mix_of_a_group_changes_on_resume(corpora):
    old = {"mix": make_mix(corpora, {"c0": 0.5, "c1": 0.5}, 6, name="train/mix"), "plain": corpora["c2"]}
    loader = GroupLoader(old, 2)
    steps = list(itertools.islice(loader, 2))
    state = json.loads(json.dumps(loader.state_dict()))
    new = {"mix": make_mix(corpora, {"c0": 0.2, "c1": 0.3, "c4": 0.5}, 6, name="train/mix"), "plain": corpora["c2"]}
    resumed = GroupLoader(new)
    with pytest.raises(ConfigError, match=r"^state.iterators.mix: the state was saved with a different setup "
                                          r"\(weights.c0: .*; added c4\); a changed mix resumes when allowed"):
        resumed.load_state_dict(state)
    resumed.load_state_dict(state, allow_changes=("mix",))
    assert resumed.resume_notes[-1] == "train/c4: added, starts at its epoch 1" and resumed.step == 2
    rest = [{name: batch.ids for name, batch in step.items()} for step in resumed]
    assert len(steps) + len(rest) == 5  # shortest: c2's 5 batches
    assert [step["plain"] for step in rest] == corpora["c2"].epoch_batches(2)[2:]
    assert resumed.state_dict()["iterators"]["mix"]["schedule_start"]["step"] == 2
    longest = GroupLoader(new, steps="longest")
    state = GroupLoader(old, steps="longest").state_at(1, 2).to_dict()
    longest.load_state_dict(state, allow_changes=["mix"])  # weights may change under longest
    shorter = {"mix": make_mix(corpora, {"c0": 1, "c1": 1}, 4, name="train/mix"), "plain": corpora["c2"]}
    with pytest.raises(ConfigError, match=r"^state.iterators.mix: a mix in a steps: longest group keeps its "
                                          r"batches_per_epoch on resume \(the group places each iterator by its "
                                          r"epoch length\): saved 6, now 4$"):
        GroupLoader(shorter, steps="longest").load_state_dict(state, allow_changes=["mix"])
    for group in (old, new, shorter):
        group["mix"].close()
