"""plot_batches / plot_iterator: the summary line, and the picture when matplotlib is there."""
import builtins

import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.iterator.block import BlockIterator
from speechiter.plot import plot_batches, plot_iterator

BATCHES = [["a", "b"], ["c"], ["d", "e", "f"]]
LENGTHS = {"a": 10, "b": 8, "c": 5, "d": 4, "e": 4, "f": 2}


def test_summary_line_counts_batches_utterances_padding_and_sizes(tmp_path, no_matplotlib):
    line = plot_batches(BATCHES, LENGTHS, tmp_path / "plan.png")
    real, padded = 33, 10 * 2 + 5 + 4 * 3
    assert line == (f"3 batches, 6 utterances, padding efficiency {100 * real / padded:.2f}%, "
                    f"batch size min/mean/max 1/2.0/3")
    assert not (tmp_path / "plan.png").exists()


def test_summary_without_lengths(tmp_path, no_matplotlib):
    assert "padding efficiency n/a" in plot_batches(BATCHES, None, tmp_path / "plan.png")


@pytest.fixture
def no_matplotlib(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("no matplotlib here")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_plot_is_written_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "plan.png"
    line = plot_batches(BATCHES, LENGTHS, path)
    assert path.stat().st_size > 1000 and line.startswith("3 batches")
    plot_batches(BATCHES, None, tmp_path / "sizes.png")
    assert (tmp_path / "sizes.png").exists()


def test_plot_iterator_uses_the_epoch_plan(tmp_path, corpus, no_matplotlib):
    iterator = BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(corpus / "idx2wav")}},
                             data_len=str(corpus / "idx2wav_len"), batch_len=16000 * 3, engine="inline")
    line = plot_iterator(iterator, tmp_path / "plan.png", epoch=2)
    assert line.startswith(f"{len(iterator)} batches, 20 utterances, padding efficiency ")
