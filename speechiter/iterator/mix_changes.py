"""Resume after the mix changes: a mix's saved state carried over into the terms of a changed mix.

# NOTE [ Changed mix ]
A mix's state resumes under other weights, another ``batches_per_epoch``, a
corpus added or a corpus removed when the resume allows it (``--resume_changes
mix``; ``load_state_dict(state, allow_changes=["mix"])``); without it such a
state is refused, saying what changed and how to allow it. Every corpus the
mix keeps must be as it was (its own options and data: its batches are its
own), and so must the seed.

The saved state is carried over (:func:`carry_over`) into a state of the new
mix, and the resume goes on as any other:

- Each corpus the mix keeps continues from its saved position, its own
  (epoch, step): it finishes its interrupted epoch, then walks on through its
  next epochs. Its *count*, the batches of its stream of epochs it gave, is
  ``(epoch - 1) * len + step``. An added corpus starts at count 0, its epoch
  1; a removed corpus's position is dropped, and reported.
- The new schedule (NOTE [ Mixing schedule ] in speechiter/plan/schedule.py)
  starts at the resume point, step S of the mix's epoch E: its step ``h`` is
  the ``h``-th step after that point, and corpus i stands at count
  ``counts[i] + schedule.count(h, i)``. The state records that point
  (``schedule_start``: epoch, step, the epoch's steps and every corpus's count
  there), so that a later resume, with or without a further change, is exact;
  a further change starts a schedule of its own from the counts at its resume
  point. A mix never changed has no ``schedule_start``: h is then the global
  step ``(E - 1) * batches_per_epoch + S`` and every count starts at 0, the
  same rule.
- The mix's epochs keep their numbers. The interrupted epoch E keeps the
  steps the saved run planned for it (at its first step, S = 0, it takes the
  new ``batches_per_epoch``); the epochs after it have the new
  ``batches_per_epoch``. The steps of the schedule before the start (epoch E
  before step S, earlier epochs) are an earlier schedule's, which the new mix
  cannot plan (a ConfigError).
- Each corpus's own state keeps its layout, so a changed mix resumes on
  another number of ranks too (NOTE [ Elastic resume ] in
  speechiter/plan/layout.py).
- In a group under ``steps: shortest`` a mix may change anything above; under
  ``steps: longest`` it keeps its ``batches_per_epoch`` (the group places each
  iterator by its epoch length: NOTE [ Group steps ] in speechiter/plan/steps.py).
"""
from typing import Dict, FrozenSet, List, Tuple

from speechiter.errors import ConfigError
from speechiter.fingerprints import summary_differences
from speechiter.plan.schedule import ScheduleStart
from speechiter.state import MixState, check_step, setup_differences
from speechiter.state_keys import KEY_SETTINGS

#: what a refused change of a mix adds
HINT = ("a changed mix resumes when allowed: --resume_changes mix (Python: "
        "load_state_dict(state, allow_changes=['mix']))")


def carry_over(mix, saved, changes: FrozenSet[str], where: str) -> Tuple[object, List[str]]:
    """``(state, lines)``: ``saved`` in the terms of ``mix`` as it is now, and one line per corpus saying what
    carried over, where the mix changed (see NOTE [ Changed mix ]) and ``changes`` allows it; a ConfigError
    with the hint where it does not. Any other state comes back as it is (its own checks follow)."""
    if not isinstance(saved, MixState) or not _changed(mix, saved) or not _mix_only(mix, saved):
        return saved, []
    if "mix" not in changes:
        raise ConfigError(where, f"the state was saved with a different setup ({_what_changed(mix, saved)}); {HINT}")
    if saved.schedule is None:
        raise ConfigError(f"{where}.{KEY_SETTINGS}", "does not say the saved mix's schedule (batches_per_epoch and "
                                                     "weights), so the state cannot resume under a changed mix")
    return _rebased(mix, saved, where)


def _changed(mix, saved: MixState) -> bool:
    return saved.config != mix.configuration(saved.scheme)[0] or sorted(saved.corpora) != sorted(mix.names)


def _mix_only(mix, saved: MixState) -> bool:
    """Whether only the mix's own settings changed: its name, seed and type are the same, and so is every
    corpus it kept."""
    before, now = saved.settings or {}, mix.configuration(saved.scheme)[1] or {}
    if (saved.iterator, saved.seed) != (mix.name, mix.seed) or before.get("type", now.get("type")) != now.get("type"):
        return False
    return not any(setup_differences(saved.corpora[name], mix.iterators[name])
                   for name in mix.names if name in saved.corpora)


def _rebased(mix, saved: MixState, where: str) -> Tuple[MixState, List[str]]:
    """The state of ``mix`` at ``saved``'s (epoch, step) with its schedule started there."""
    epoch, step = saved.epoch, saved.step
    before = saved.start
    steps = before.epoch_steps if before is not None and before.epoch == epoch else \
        saved.schedule["batches_per_epoch"]
    check_step(step, steps, epoch, f"{where}.step")
    counts: Dict[str, int] = {}
    for name, size in zip(mix.names, mix.planner.sizes):
        own = saved.corpora.get(name)
        counts[name] = 0 if own is None else (own.epoch - 1) * size + own.step
    start = ScheduleStart(epoch, step, steps if step else len(mix), counts)
    config, settings = mix.configuration(saved.scheme)
    view, batches = mix.view_digest(saved.scheme)
    corpora = {name: saved.corpora[name] if name in saved.corpora else mix.iterators[name].state_at(1, 0, saved.scheme)
               for name in mix.names}
    state = MixState(iterator=saved.iterator, epoch=epoch, step=step, seed=saved.seed, config=config, view=view,
                     batches=batches, corpora=corpora, schedule=mix.schedule_settings(), settings=settings,
                     layout=saved.layout, scheme=saved.scheme, start=start)
    return state, _lines(mix, saved, start)


def _what_changed(mix, saved: MixState) -> str:
    """``batches_per_epoch: saved 9, now 6; weights.cv: saved "3/10", now "1/2"; added new; removed old``."""
    kept = [name for name in mix.names if name in saved.corpora]
    before, now = ({key: value for key, value in (summary or {}).items() if not key.startswith("iterators.")
                    and (not key.startswith("weights.") or key[len("weights."):] in kept)}
                   for summary in (saved.settings, mix.configuration(saved.scheme)[1]))
    changed = summary_differences(before, now)
    added, removed = [n for n in mix.names if n not in saved.corpora], [n for n in saved.corpora if n not in kept]
    changed += [f"{what} {', '.join(names)}" for what, names in (("added", added), ("removed", removed)) if names]
    return "; ".join(changed) or "the corpora's settings summaries are the same, their fingerprints are not"


def _lines(mix, saved: MixState, start: ScheduleStart) -> List[str]:
    """What carried over: the mix's line, then one per corpus (kept, added, removed)."""
    lines = [f"{mix.name}: the mix changed ({_what_changed(mix, saved)}); its new schedule starts after step "
             f"{start.step} of epoch {start.epoch}"]
    if start.step and start.epoch_steps != len(mix):
        lines[0] += f", which keeps its {start.epoch_steps} steps (the next epochs have {len(mix)})"
    for name, iterator in mix.iterators.items():
        own = saved.corpora.get(name)
        if own is None:
            lines.append(f"{iterator.name}: added, starts at its epoch 1")
            continue
        line = f"{iterator.name}: continues its epoch {own.epoch} at step {own.step} of {len(iterator)}"
        lines.append(line + (" (weight 0: it gives no batches now)" if not mix.weights[name] else ""))
    for name, own in saved.corpora.items():
        if name not in mix.iterators:
            lines.append(f"{own.iterator}: removed (was at its epoch {own.epoch} step {own.step})")
    return lines
