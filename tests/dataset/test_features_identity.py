"""Issue 29, item 2: the blocked log-mel kernel with reused buffers (NOTE [ Log-mel memory traffic ] in
speechiter/fbank.py) gives the bits of the plain one (tests/dataset/fbank_reference.py), on a corpus of real
files and on every setting that changes the arithmetic."""
import numpy as np
import pytest
import soundfile

from speechiter import fbank
from speechiter.features import LogMel
from tests.conftest import _make_corpus
from tests.dataset.fbank_reference import reference_log_mel

SETTINGS = [
    {},
    {"dither": 1.0},
    {"dither": 0.5, "normalize": "utterance", "remove_dc_offset": False},
    {"preemphasis": 0.0, "window": "hamming", "n_mels": 40},
    {"preemphasis": 1.0, "window": "rectangular", "n_fft": 1024},
    {"window": "blackman", "frame_length": 50, "frame_shift": 12.5, "remove_dc_offset": False},
]


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.fixture(scope="module")
def waves(tmp_path_factory):
    root = _make_corpus(tmp_path_factory.mktemp("identity"), num=4, min_sec=0.3, max_sec=3.0)
    waves = [soundfile.read(root / line.split()[1], dtype="float32")[0]
             for line in (root / "idx2wav").read_text().splitlines()]
    rng = np.random.default_rng(5)
    lengths = (400, 400 + 127 * 160, 400 + 128 * 160, 400 + 1100 * 160)  # one frame, block edges, 3 blocks
    return waves + [rng.uniform(-1, 1, n).astype(np.float32) for n in lengths]


@pytest.mark.parametrize("conf", SETTINGS)
def test_blocked_kernel_gives_the_plain_kernels_bits(waves, conf):
    mel = LogMel(sample_rate=16000, **conf)
    for i, wave in enumerate(waves):
        ours, theirs = np.random.default_rng(i), np.random.default_rng(i)
        feat = mel(wave, ours if mel.dither else None)
        assert same_bits(feat, reference_log_mel(mel, wave, theirs if mel.dither else None)), (conf, i)
        assert ours.bit_generator.state == theirs.bit_generator.state  # as many draws


@pytest.mark.parametrize("block", [5, 64, 1000])
def test_any_block_size_gives_the_same_bits(waves, block):
    mel = LogMel(sample_rate=16000, dither=1.0)
    workspace = fbank.Workspace()
    for i, wave in enumerate(waves[-4:-1]):
        feat = fbank.utterance_log_mel(mel, wave, mel.num_frames(len(wave)), np.random.default_rng(i), workspace,
                                       block=block)
        assert same_bits(feat, reference_log_mel(mel, wave, np.random.default_rng(i)))


def test_buffers_are_reused_and_results_are_not():
    mel = LogMel(sample_rate=16000)
    long, short = np.full(32000, 0.1, np.float32), np.full(8000, 0.2, np.float32)
    first = mel(long)
    kept = first.copy()
    buffers = dict(mel._workspace._local.buffers)
    mel(short)
    assert same_bits(first, kept)  # a later utterance does not write into an earlier result
    assert all(mel._workspace._local.buffers[name] is buffer for name, buffer in buffers.items())
