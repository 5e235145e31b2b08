"""Bad data files get one clear DataError naming the file and the utterance:
non-regular files, headers that disagree with the audio, batches that cannot
be collated, selections that leave nothing, impossible lengths (issue 14)."""
import io
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechiter.io import flac
from speechiter.io.audio import audio_info
from speechiter.io.headers import check_decoded_bytes
from speechiter.io.read import read_feat
from speechiter.io.wav import read_wav_header
from speechiter.build import build_iterators
from speechiter.config import load_config
from speechiter.dataset.abs import Dataset
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError, DataError
from speechiter.idx2 import check_lengths, read_idx2_numbers, read_idx2_table
from speechiter.iterator.block import BlockIterator
from tests.inprocess import run_cli
from tests.recipes import entry

REPO = Path(__file__).resolve().parents[2]


def pcm(frames, channels=1, seed=0):
    return (np.random.default_rng(seed).standard_normal((frames, channels)) * 3000).astype(np.int16)


def first_line(corpus, name="idx2wav"):
    uid, value = (corpus / name).read_text().splitlines()[0].split()
    return uid, corpus / value


def replace_first_file(corpus, make):
    """Replace the first utterance's audio by what ``make(path)`` puts there."""
    uid, path = first_line(corpus)
    path.unlink()
    make(path)
    return uid, path


# --------------------------------------------------------------------- non-regular files


def make_fifo(path):
    os.mkfifo(path)


def make_socket(path):
    server = socket.socket(socket.AF_UNIX)
    cwd = os.getcwd()
    os.chdir(path.parent)  # bound by its name: a socket's path has at most 107 bytes, a tmp_path may be longer
    try:
        server.bind(path.name)
    finally:
        os.chdir(cwd)
    return server


def make_char_device(path):
    os.symlink("/dev/zero", path)  # reads forever


NON_REGULAR = [(make_fifo, r"a FIFO \(named pipe\)"), (make_socket, "a socket"),
               (make_char_device, "a character device"), (os.mkdir, "a folder")]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("make, kind", NON_REGULAR, ids=["fifo", "socket", "chardev", "folder"])
def test_a_non_regular_audio_file_names_file_and_utterance(corpus, make, kind):
    uid, path = replace_first_file(corpus, make)
    dataset = SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav")})
    with pytest.raises(DataError, match=rf"^utterance {uid} \(feat from .*idx2wav\): {path}: is {kind}, "
                                        r"expected a data file$"):
        dataset.get_batch([uid])


@pytest.mark.timeout(30)
@pytest.mark.parametrize("suffix", [".npy", ".npz:x", ".hdf5:x", ".flac"])
def test_a_fifo_where_features_or_headers_are_read_is_refused(tmp_path, suffix):
    file = tmp_path / f"f{suffix.split(':')[0]}"
    os.mkfifo(file)
    value = str(file) + (":x" if ":" in suffix else "")
    for call in (lambda: read_feat(value), lambda: audio_info(file)):
        with pytest.raises(DataError, match=rf"^{file}: is a FIFO \(named pipe\), expected a data file"):
            call()


@pytest.mark.timeout(30)
def test_a_fifo_as_idx2_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "idx2wav")
    with pytest.raises(DataError, match=r"idx2wav: is a FIFO \(named pipe\), expected an idx2 file"):
        read_idx2_table(tmp_path / "idx2wav")
    with pytest.raises(DataError, match="expected an idx2 file"):
        SpeechTextDataset(main_data={"feat": str(tmp_path / "idx2wav")})


@pytest.mark.timeout(60)
def test_the_cli_with_a_fifo_inline_exits_2_naming_file_and_utterance(corpus, tmp_path, make_recipe):
    uid, path = replace_first_file(corpus, make_fifo)
    cfg = make_recipe(corpus, train=False, valid=None,
                      test={"clean": entry(corpus, "piece.PieceIterator", batch_size=4)})
    result = run_cli("--data_cfg", cfg, "--mode", "test", "--num_workers", 0, "--engine", "inline", "--quiet")
    assert result.returncode == 2, result.stderr
    assert f"utterance {uid}" in result.stderr and f"{path}: is a FIFO" in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------- headers that disagree with the audio


def set_streaminfo_rate(path, rate):
    """Overwrite the 20 sample-rate bits of a FLAC file's STREAMINFO block."""
    data = bytearray(path.read_bytes())
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # STREAMINFO comes first
    data[18], data[19] = (rate >> 12) & 0xFF, (rate >> 4) & 0xFF
    data[20] = (data[20] & 0x0F) | ((rate & 0x0F) << 4)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("reader", ["dr_flac", "libsndfile"])
@pytest.mark.parametrize("rate", [22050, 16001, 8000])
def test_a_corrupted_flac_sample_rate_is_an_error_not_another_utterance(tmp_path, monkeypatch, reader, rate):
    if reader == "libsndfile":
        monkeypatch.setattr(flac, "_lib", None)
    path = tmp_path / "a.flac"
    sf.write(path, pcm(40000), 16000, subtype="PCM_16")
    set_streaminfo_rate(path, rate)
    assert sf.info(path).samplerate == rate  # the decoders believe STREAMINFO...
    with pytest.raises(DataError, match=rf"^{path}: corrupt FLAC header: STREAMINFO gives a sample rate of "
                                        rf"{rate} Hz but the first frame says 16000 Hz$"):
        read_feat(str(path), 16000)  # ... which would give 40000 * 16000 / rate frames


def test_a_corrupted_flac_channel_count_is_an_error(tmp_path):
    path = tmp_path / "a.flac"
    sf.write(path, pcm(20000, channels=2), 16000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    data[20] = (data[20] & 0xF1) | (2 << 1)  # 3 channels
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=rf"^{path}: "):
        read_feat(str(path))


@pytest.mark.parametrize("rate", [8000, 11025, 22050, 44100, 48000, 12345, 65540, 96000])
@pytest.mark.parametrize("subtype, channels", [("PCM_S8", 1), ("PCM_16", 2), ("PCM_24", 6)])
def test_healthy_flac_files_pass_the_header_check(tmp_path, rate, subtype, channels):
    path = tmp_path / "a.flac"
    x = pcm(5000, channels)
    sf.write(path, x, rate, subtype=subtype)
    assert read_feat(str(path)).shape == (5000, channels)


def test_a_wav_shorter_than_its_header_says_is_an_error(corpus):
    uid, path = first_line(corpus)
    frames = sf.info(path).frames
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 2 * (frames // 3)])  # 16-bit mono: lose a third of the samples
    assert sf.read(path)[0].shape[0] == frames - frames // 3  # libsndfile reads it silently
    left = path.stat().st_size - read_wav_header(lambda pos, n: data[pos:pos + n]).offset
    dataset = SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav")})
    with pytest.raises(DataError, match=rf"^utterance {uid} \(feat from .*idx2wav\): {path}: truncated WAV: its "
                                        rf"header gives {frames} frames .* but only {frames - frames // 3} were "
                                        rf"decoded \({left} bytes are left in the file\)"):
        dataset.get_batch([uid])


def test_a_truncated_wav_held_in_memory_says_how_many_bytes_are_left():
    buffer = io.BytesIO()
    sf.write(buffer, np.zeros(1000, dtype=np.int16), 16000, format="WAV", subtype="PCM_16")
    data = buffer.getvalue()[:-200]  # 100 frames short
    with pytest.raises(DataError, match=r"^p\.pack#bytes=0-9: truncated WAV: its header gives 1000 frames \(2000 "
                                        r"bytes of data\) but only 900 were decoded \(1800 bytes are left"):
        check_decoded_bytes(data, "p.pack#bytes=0-9", 900)


@pytest.mark.parametrize("placeholder", [0xFFFFFFFF, 0x7FFFF000])
def test_a_streamed_wav_without_sizes_still_reads(tmp_path, placeholder):
    path = tmp_path / "a.wav"
    x = pcm(3000, channels=2)
    sf.write(path, x, 16000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    at = data.index(b"data")
    data[at + 4:at + 8] = placeholder.to_bytes(4, "little")
    data[4:8] = placeholder.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    np.testing.assert_array_equal(read_feat(str(path)), x / np.float32(32768))


def test_wav_with_chunks_after_the_data_reads(tmp_path):
    path = tmp_path / "a.wav"
    x = pcm(3001)
    sf.write(path, x, 16000, subtype="PCM_16")
    path.write_bytes(path.read_bytes() + b"LIST" + (5).to_bytes(4, "little") + b"abcde\0")
    assert read_feat(str(path)).shape == (3001, 1)


# --------------------------------------------------------------------- batches that cannot be collated


def test_a_stereo_file_in_a_mono_batch_names_file_and_utterance(corpus):
    ids = [line.split()[0] for line in (corpus / "idx2wav").read_text().splitlines()]
    uid, path = replace_first_file(corpus, lambda p: sf.write(p, pcm(8000, channels=2), 16000))
    dataset = SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav")})
    batch = [ids[3], uid, ids[5]]
    with pytest.raises(DataError, match=rf"^utterance {uid} \(feat from .*idx2wav\): {path} has shape \(T, 2\) "
                                        r"but the batch's other utterances have \(T, 1\)$"):
        dataset.get_batch(batch)


def test_features_of_another_dimension_name_file_and_utterance(tmp_path):
    for uid, dim in (("a", 80), ("b", 80), ("c", 40)):
        np.save(tmp_path / f"{uid}.npy", np.zeros((10, dim), np.float32))
    idx2 = tmp_path / "idx2feat"
    idx2.write_text("a a.npy\nb b.npy\nc c.npy\n")
    dataset = SpeechTextDataset(main_data={"feat": str(idx2)})
    with pytest.raises(DataError, match=rf"^utterance c \(feat from {idx2}\): {tmp_path / 'c.npy'} has shape "
                                        r"\(T, 40\) but the batch's other utterances have \(T, 80\)$"):
        dataset.get_batch(["a", "c", "b"])


class Arrays(Dataset):
    """Base-class collation of arrays made from the idx2 value (no file)."""

    def extract_main_data_fn(self, main_data):
        dim = int(main_data["x"])
        return {"x": main_data["x"], "arr": np.zeros((3, dim), np.float32)}


def test_base_dataset_arrays_of_another_shape_name_the_utterance(tmp_path):
    idx2 = tmp_path / "idx2x"
    idx2.write_text("a 2\nb 2\nc 5\n")
    with pytest.raises(DataError, match=r"^utterance c: arr has shape \(T, 5\) but the batch's other utterances "
                                        r"have \(T, 2\)$"):
        Arrays(main_data={"x": str(idx2)}).get_batch(["a", "b", "c"])


class SomeSpeakers(Dataset):
    """Gives spk_ids only for utterances whose id starts with 's'."""

    def extract_main_data_fn(self, main_data):
        uid = main_data.pop("id")
        return {**main_data, "spk_ids": "spk1"} if uid.startswith("s") else main_data


def test_utterances_with_different_keys_are_an_error_naming_ids_and_keys(tmp_path):
    idx2 = tmp_path / "idx2text"
    idx2.write_text("s1 hello\ns2 world\nu3 again\n")
    dataset = SomeSpeakers(main_data={"text": str(idx2)})
    assert dataset.get_batch(["s1", "s2"])["spk_ids"] == ["spk1", "spk1"]
    with pytest.raises(DataError, match=r"^utterances of one batch give different data: s1 gives \['spk_ids', "
                                        r"'text'\], u3 gives \['text'\]$"):
        dataset.get_batch(["s1", "u3", "s2"])


# --------------------------------------------------------------------- data_selection that leaves nothing


@pytest.mark.parametrize("rule, message", [
    (lambda c: ["order", 0.01], r"rule 1 \['order', 0.01\] keeps none \(20 before rule 1\)"),
    (lambda c: [["order", 0.5], ["min", "0", str(c / "idx2wav_len")]],
     r"rule 2 \['min', '0', '.*idx2wav_len'\] keeps none \(20 before rule 1, 10 before rule 2\)"),
    (lambda c: [["rev_order", -5], ["group", "nobody", str(c / "idx2spk")]],
     r"rule 2 .* keeps none \(20 before rule 1, 5 before rule 2\)"),
], ids=["fraction", "threshold", "group"])
def test_a_data_selection_that_leaves_no_utterance(corpus, rule, message):
    with pytest.raises(ConfigError, match=rf"^data_selection: leaves no utterance: {message}$"):
        SpeechTextDataset(main_data={"feat": str(corpus / "idx2wav")}, data_selection=rule(corpus))


def test_an_empty_selection_names_the_config_path(corpus, make_recipe):
    selection = {"data_selection": ["order", 0.01]}
    cfg = make_recipe(corpus, train=False, valid=None,
                      test={"clean": entry(corpus, "piece.PieceIterator", dataset_conf=selection, data_len=False,
                                           batch_size=4)})
    with pytest.raises(ConfigError, match=r"^data_cfg\.test\.clean\.conf\.dataset_conf\.data_selection: leaves no "
                                          r"utterance: rule 1 \['order', 0.01\] keeps none \(20 before rule 1\)$"):
        build_iterators(load_config(str(cfg)), num_workers=0)


# --------------------------------------------------------------------- impossible lengths


@pytest.mark.parametrize("value, kind", [("-3", "not positive"), ("0", "not positive"), ("nan", "not a number"),
                                         ("inf", "not finite"), ("-inf", "not finite"), ("1e400", "not finite")])
def test_a_length_file_with_an_impossible_length_names_file_and_line(corpus, tmp_path, value, kind):
    lines = (corpus / "idx2wav_len").read_text().splitlines()
    uid = lines[6].split()[0]
    lines[6] = f"{uid} {value}"
    bad = tmp_path / "idx2wav_len"
    bad.write_text("\n".join(lines[:3] + [""] + lines[3:]) + "\n")  # a blank line: line 8 is entry 7
    with pytest.raises(DataError, match=rf"^{bad}:8: length .* of id '{uid}' is {kind}; lengths must be positive"):
        read_idx2_numbers(bad)
    with pytest.raises(DataError, match=rf"^{bad}:8: "):
        BlockIterator(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(corpus / "idx2wav")}},
                      data_len=str(bad), batch_len=40000)


def test_lengths_in_a_file_the_fast_parser_leaves_to_read_idx2_are_checked_too(tmp_path):
    bad = tmp_path / "len"
    bad.write_text("  a 10\nb\u00a0-2\n", encoding="utf-8")  # leading blanks, a non-ASCII space: fallback parser
    with pytest.raises(DataError, match=rf"^{bad}:2: length -2 of id 'b' is not positive"):
        read_idx2_numbers(bad)


def test_check_lengths_of_lengths_from_no_file_names_the_source():
    check_lengths("MyDataset.data_len_register_fn", np.array([b"a", b"b"]), np.array([3.0, 1.5]))
    with pytest.raises(DataError, match=r"^MyDataset.data_len_register_fn: length nan of id 'b' is not a number; "):
        check_lengths("MyDataset.data_len_register_fn", np.array([b"a", b"b"]), np.array([3.0, np.nan]))


def test_selection_metadata_may_be_negative(tmp_path):
    """Only lengths must be positive: data_selection metadata (an SNR) may not."""
    idx2 = tmp_path / "idx2text"
    idx2.write_text("a x\nb y\nc z\n")
    snr = tmp_path / "idx2snr"
    snr.write_text("a -5\nb 3\nc -1\n")
    dataset = SpeechTextDataset(main_data={"text": str(idx2)}, data_selection=["min", -2, str(snr)])
    assert list(dataset.get_data_index()) == ["a", "c"]
