"""Issue 14: an utterance whose decoded length disagrees with its waveform length file is an error naming both
(NOTE [ Length files are checked ] in speechiter/dataset/length_check.py)."""
import shutil

import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import DataError
from speechiter.iterator.block import BlockIterator


def load(root, length_file="idx2wav_len", **dataset_conf):
    iterator = BlockIterator(dataset_type=SpeechTextDataset,
                             dataset_conf={"main_data": {"feat": str(root / "idx2wav")}, **dataset_conf},
                             data_len=str(root / length_file), batch_len=16000 * 3, engine="inline", out_type="null")
    try:
        return sum(len(b.ids) for b in iterator.build_loader(1))
    finally:
        iterator.close()


def edit_length(root, name="idx2wav_len", delta=1):
    lines = (root / "idx2wav_len").read_text().splitlines()
    uid, n = lines[3].split()
    lines[3] = f"{uid} {int(n) + delta}"
    (root / name).write_text("\n".join(lines) + "\n")
    return uid, int(n)


def test_a_stale_length_file_names_the_utterance_and_both_lengths(corpus, tmp_path):
    root = shutil.copytree(corpus, tmp_path / "c")
    uid, n = edit_length(root, delta=160)
    with pytest.raises(DataError, match=rf"utterance {uid} \(feat from .*idx2wav\): decoded {n} samples, but "
                                        rf".*idx2wav_len says {n + 160}; the length file is stale"):
        load(root)


def test_lengths_of_the_stored_or_of_the_resampled_audio_both_agree(corpus, tmp_path):
    assert load(corpus) == 20  # the corpus's own lengths
    assert load(corpus, sample_rate=8000) == 20  # stored at 16 kHz, read at 8 kHz: the file counts the stored audio
    root = shutil.copytree(corpus, tmp_path / "c")
    resampled = [f"{uid} {-(-int(n) // 2)}" for uid, n in (l.split() for l in (corpus / "idx2wav_len").read_text().splitlines())]
    (root / "idx2wav_len").write_text("\n".join(resampled) + "\n")
    assert load(root, sample_rate=8000) == 20  # lengths at the rate the dataset reads


def test_other_length_files_are_not_checked(corpus, tmp_path):
    root = shutil.copytree(corpus, tmp_path / "c")
    edit_length(root, name="idx2frames", delta=160)  # not a waveform length file by its name
    assert load(root, length_file="idx2frames") == 20
