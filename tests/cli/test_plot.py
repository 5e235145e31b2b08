"""plot_batches / plot_iterator: the summary line, and the picture when matplotlib is there (issue 13, item 9)."""
import builtins
import sys
from pathlib import Path

import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.iterator.block import BlockIterator
from speechiter.plot import draw, length_unit, plot_batches, plot_iterator, summarize, summary_line
from tests.inprocess import run_cli

BATCHES = [["a", "b"], ["c"], ["d", "e", "f"]]
LENGTHS = {"a": 10, "b": 8, "c": 5, "d": 4, "e": 4, "f": 2}
REPO = Path(__file__).resolve().parents[2]


def test_summary_line_counts_batches_utterances_padding_and_sizes():
    line = summary_line(summarize(BATCHES, LENGTHS))
    real, padded = 33, 10 * 2 + 5 + 4 * 3
    assert line == (f"3 batches, 6 utterances, padding efficiency {100 * real / padded:.2f}%, "
                    f"batch size min/mean/max 1/2.0/3")


def test_summary_without_lengths():
    assert "padding efficiency n/a" in summary_line(summarize(BATCHES, None))


@pytest.fixture
def no_matplotlib(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("no matplotlib here")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_without_matplotlib_plotting_says_what_to_install(tmp_path, no_matplotlib):
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'speechiter\[plot\]'"):
        plot_batches(BATCHES, LENGTHS, tmp_path / "plan.png")
    assert not (tmp_path / "plan.png").exists()


@pytest.mark.slow
def test_plot_is_written_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "plan.png"
    line = plot_batches(BATCHES, LENGTHS, path)
    assert path.stat().st_size > 1000 and line.startswith("3 batches")
    plot_batches(BATCHES, None, tmp_path / "sizes.png")
    assert (tmp_path / "sizes.png").exists()


def test_counts_get_integer_ticks_lengths_their_unit_and_the_budget_a_line():
    pytest.importorskip("matplotlib")
    from matplotlib.ticker import MaxNLocator
    figure = draw(BATCHES, summarize(BATCHES, LENGTHS), "t", unit="samples", budget=20)
    left, right = figure.axes
    for axis in (left.yaxis, right.xaxis):
        locator = axis.get_major_locator()
        assert isinstance(locator, MaxNLocator) and locator._integer
    assert left.get_xlabel() == "longest utterance in the batch (samples)"
    assert right.get_ylabel() == "samples per batch"
    assert [line.get_label() for line in right.get_lines()] == ["batch_len 20"]
    assert right.get_lines()[0].get_ydata()[0] == 20
    assert "batch_len / longest" in [line.get_label() for line in left.get_lines()]


def test_length_units():
    assert length_unit("data/idx2wav_len") == "samples"
    assert length_unit(["a/idx2feat_len"]) == "frames"
    assert length_unit(None) == "tokens"


def test_plot_iterator_uses_the_epoch_plan(tmp_path, corpus):
    pytest.importorskip("matplotlib")
    iterator = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(corpus / "idx2wav")}},
                             data_len=str(corpus / "idx2wav_len"), batch_len=16000 * 3, engine="inline")
    line = plot_iterator(iterator, tmp_path / "plan.png", epoch=2)
    assert line.startswith(f"{len(iterator)} batches, 20 utterances, padding efficiency ")
    assert (tmp_path / "plan.png").exists()


@pytest.mark.timeout(180)
def test_cli_plot_without_matplotlib_says_so_once_and_prints_the_summary_once(tmp_path, demo_root, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    plot = tmp_path / "plan.png"
    done = run_cli("--data_cfg", "recipes/demo/asr.yaml", "--epochs", 1, "--num_workers", 0, "--quiet",
                   "--plot", plot)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "speechiter: --plot needs matplotlib: pip install 'speechiter[plot]' (nothing was drawn)"
    assert not plot.exists()
    lines = done.stdout.splitlines()
    assert len(lines) == len(set(lines))  # nothing twice
    assert sum(line.startswith("iterator ") for line in lines) == 1  # the table, once
