"""A look at a batching plan: utterances per batch against the longest, and padding per batch.

    summary = plot_iterator(iterator, "plan.png")    # the epoch-1 plan
    summary = plot_batches(batches, lengths, "plan.png")

Drawing needs matplotlib (the ``plot`` extra); without it :func:`plot_batches`
raises ModuleNotFoundError saying what to install, and nothing is written.
"""
import os
from typing import Mapping, Optional, Sequence, Tuple

import numpy as np

from speechiter.messages import say


def summarize(batches: Sequence[Sequence[str]], lengths: Optional[Mapping[str, float]]) -> dict:
    """Batches, utterances, padding efficiency (real / padded frames) and batch sizes."""
    values = None if lengths is None else [[lengths[u] for u in b] for b in batches]
    return summarize_lengths(batches, values)


def summarize_lengths(batches: Sequence[Sequence[str]], values: Optional[Sequence[Sequence[float]]]) -> dict:
    """:func:`summarize` with each batch's lengths given (``values[i]``: batch i's, in its order)."""
    sizes = np.array([len(b) for b in batches], dtype=np.int64)
    stats = {"batches": len(sizes), "utterances": int(sizes.sum()), "min_batch": int(sizes.min()) if len(sizes) else 0,
             "mean_batch": float(sizes.mean()) if len(sizes) else 0.0, "max_batch": int(sizes.max(initial=0)),
             "padding_efficiency": None, "longest": None, "real": None, "padded": None}
    if values is not None and len(sizes):
        values = [np.array(v, dtype=np.float64) for v in values]
        stats["longest"] = np.array([v.max() for v in values])
        stats["real"] = np.array([v.sum() for v in values])
        stats["padded"] = stats["longest"] * sizes
        stats["padding_efficiency"] = float(stats["real"].sum() / stats["padded"].sum())
    return stats


def summary_line(stats: dict) -> str:
    padding = ("padding efficiency n/a (no lengths)" if stats["padding_efficiency"] is None
               else f"padding efficiency {100 * stats['padding_efficiency']:.2f}%")
    return (f"{stats['batches']} batches, {stats['utterances']} utterances, {padding}, batch size "
            f"min/mean/max {stats['min_batch']}/{stats['mean_batch']:.1f}/{stats['max_batch']}")


NEEDS_MATPLOTLIB = "--plot needs matplotlib: pip install 'speechiter[plot]' (nothing was drawn)"


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def length_unit(data_len_files, dataset=None) -> str:
    """What the lengths count: frames where the dataset computes features (``feat_conf``), else by the
    length files' names: frames, samples, or (text lengths) tokens."""
    if getattr(dataset, "feat_extractor", None) is not None:
        return "frames"
    names = " ".join([data_len_files] if isinstance(data_len_files, str) else data_len_files or [])
    if not names:
        return "tokens"
    return "frames" if "feat" in names else "samples" if "wav" in names or "segments" in names else "length units"


def plot_batches(batches: Sequence[Sequence[str]], lengths: Optional[Mapping[str, float]], path,
                 title: Optional[str] = None, unit: str = "frames", budget: Optional[float] = None) -> str:
    """Draw the plan into ``path`` (any matplotlib format) and return the summary line.

    Left: utterances per batch against the batch's longest utterance. Right:
    padded frames per batch (real part and padding), in plan order.
    """
    return _plot(batches, summarize(batches, lengths), path, title, unit, budget)


def _plot(batches, stats: dict, path, title: Optional[str], unit: str, budget: Optional[float]) -> str:
    line = summary_line(stats)
    figure = draw(batches, stats, title or line, unit, budget)
    figure.savefig(path)
    import matplotlib.pyplot as plt
    plt.close(figure)
    return line


def draw(batches: Sequence[Sequence[str]], stats: dict, title: str, unit: str = "frames",
         budget: Optional[float] = None):
    """The matplotlib figure of :func:`plot_batches`."""
    if not have_matplotlib():
        raise ModuleNotFoundError(NEEDS_MATPLOTLIB)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    sizes = np.array([len(b) for b in batches])
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    if stats["longest"] is not None:
        left.scatter(stats["longest"], sizes, s=4, alpha=0.5)
        left.set_xlabel(f"longest utterance in the batch ({unit})")
        steps = np.arange(len(sizes))
        right.bar(steps, stats["real"], width=1.0, label="real")
        right.bar(steps, stats["padded"] - stats["real"], bottom=stats["real"], width=1.0, label="padding")
        right.set_ylabel(f"{unit} per batch")
        if budget:
            right.axhline(budget, color="black", linestyle="--", linewidth=1, label=f"batch_len {budget:g}")
            longest = np.linspace(max(stats["longest"].min(), 1e-9), stats["longest"].max(), 200)
            left.plot(longest, budget / longest, "k--", linewidth=1, label="batch_len / longest")
            left.set_ylim(0, max(sizes.max(), 1) * 1.1)
            left.legend()
        right.legend()
    else:
        left.hist(sizes, bins=min(50, max(1, len(set(sizes.tolist())))))
        left.set_xlabel("utterances per batch")
        left.set_ylabel("batches")
        right.plot(sizes)
        right.set_ylabel("utterances")
    if stats["longest"] is not None:
        left.set_ylabel("utterances per batch")
    right.set_xlabel("batch (plan order)")
    left.yaxis.set_major_locator(MaxNLocator(integer=True))
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    if stats["longest"] is None:
        right.yaxis.set_major_locator(MaxNLocator(integer=True))
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    return figure


def plot_iterator(iterator, path, epoch: int = 1) -> str:
    """:func:`plot_batches` of an Iterator's plan for ``epoch`` (clipped and shuffled as loaded); a mix's
    batches with the lengths of their corpora."""
    batches = iterator.epoch_batches(epoch)
    corpora = [iterator.iterators[iterator.source_of(epoch, step)] for step in range(1, len(batches) + 1)] \
        if hasattr(iterator, "source_of") else [iterator] * len(batches)
    values = None if any(corpus.data_len is None for corpus in corpora) else [
        [corpus.data_len[u] for u in batch] for corpus, batch in zip(corpora, batches)]
    stats = summarize_lengths(batches, values)
    title = f"{iterator.name}, epoch {epoch}: {summary_line(stats)}"
    units = {length_unit(it.data_len_files, it.dataset) for it in set(corpora)}
    budgets = {getattr(it, "iter_conf", {}).get("batch_len") for it in set(corpora)}
    return _plot(batches, stats, path, title, units.pop() if len(units) == 1 else "length units",
                 budgets.pop() if len(budgets) == 1 else None)


def plot_plans(named: Sequence[Tuple[str, object]], path: str, epoch: int) -> None:
    """The CLI's --plot: one figure per ``(name, iterator)`` (``batches.png``, or ``batches.train-sup.png``
    for several), and its summary line; without matplotlib one line on stderr saying what to install."""
    if not have_matplotlib():
        say(f"speechiter: {NEEDS_MATPLOTLIB}")
        return
    root, ext = os.path.splitext(path)
    for name, iterator in named:
        target = path if len(named) == 1 else f"{root}.{name.replace('/', '-')}{ext or '.png'}"
        print(f"{name}: {plot_iterator(iterator, target, epoch)}")
