"""The peers and probes of tools/bench_node.py, importable by its worker processes.

- :func:`peer_loader`: torch's DataLoader over the same batches, reading with soundfile, log-mel with
  torchaudio's Kaldi fbank (kaldi-native-fbank where torchaudio is missing), pin_memory for the CUDA feed;
- :func:`kernel_rate`: one process computing log-mel on in-memory waves (the plain kernel of
  tests/dataset/fbank_reference.py or speechiter's blocked one), for the kernel's scaling with processes;
- :class:`ThreadProbe`: a worker's numeric libraries' thread counts.
"""
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SAMPLE_RATE = 16000


def fbank_backend():
    """'torchaudio', 'kaldi-native-fbank' or None: the peer's log-mel."""
    for module, name in (("torchaudio", "torchaudio"), ("kaldi_native_fbank", "kaldi-native-fbank")):
        if importlib.util.find_spec(module) is not None:
            return name
    return None


class SoundfileBatches:
    """A DataLoader dataset whose item ``i`` is the padded batch of ``plan[i]`` (ids), read with soundfile."""

    def __init__(self, paths, plan, feat: bool):
        self.paths, self.plan, self.feat = paths, plan, feat
        self.backend = fbank_backend() if feat else None

    def __len__(self):
        return len(self.plan)

    def __getitem__(self, i):
        import soundfile
        import torch
        rows = [soundfile.read(self.paths[uid], dtype="float32")[0] for uid in self.plan[i]]
        if self.feat:
            rows = [self._fbank(row) for row in rows]
        lengths = torch.tensor([len(row) for row in rows])
        feat = torch.zeros((len(rows), int(lengths.max())) + rows[0].shape[1:], dtype=torch.float32)
        for row, value in zip(feat, rows):
            row[:len(value)] = torch.as_tensor(value)
        return {"feat": feat, "feat_len": lengths}

    def _fbank(self, wave):
        if self.backend == "torchaudio":
            import torch
            import torchaudio.compliance.kaldi as kaldi
            return kaldi.fbank(torch.from_numpy(wave * 32768)[None], num_mel_bins=80, dither=0.0,
                               energy_floor=0.0, sample_frequency=SAMPLE_RATE)
        import kaldi_native_fbank as knf
        opts = knf.FbankOptions()
        opts.frame_opts.dither, opts.mel_opts.num_bins = 0.0, 80
        fbank = knf.OnlineFbank(opts)
        fbank.accept_waveform(SAMPLE_RATE, (wave * 32768).tolist())
        fbank.input_finished()
        return np.stack([fbank.get_frame(i) for i in range(fbank.num_frames_ready)])


class EpochSampler:
    """The batch numbers of the epoch being loaded (set before each epoch; the workers persist)."""

    def __init__(self):
        self.indices = range(0)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


def peer_loader(corpus: Path, plan, workers: int, feat: bool, pin_memory: bool = False):
    """torch's DataLoader over ``plan`` (persistent workers, prefetch 4, pin_memory for the CUDA feed); set
    ``loader.sampler.indices`` to the batches of an epoch before iterating."""
    import torch.utils.data
    paths = dict(line.split(maxsplit=1) for line in (corpus / "idx2wav").read_text().splitlines())
    paths = {uid: str(corpus / path.strip()) for uid, path in paths.items()}
    extra = dict(persistent_workers=True, prefetch_factor=4) if workers else {}
    return torch.utils.data.DataLoader(SoundfileBatches(paths, plan, feat), batch_size=None,
                                       sampler=EpochSampler(), num_workers=workers, pin_memory=pin_memory, **extra)


def kernel_rate(variant: str, seconds: float, barrier, queue) -> None:
    """Log-mel of in-memory waves for ``seconds`` once every process is ready (``barrier``): puts
    (audio s / CPU s, audio s / wall s)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    torch.set_num_threads(1)
    from speechiter import fbank
    from speechiter.features import LogMel
    spec = importlib.util.spec_from_file_location("fbank_reference", REPO / "tests/dataset/fbank_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    rng = np.random.default_rng(os.getpid())
    waves = [rng.uniform(-0.1, 0.1, int(SAMPLE_RATE * s)).astype(np.float32) for s in rng.uniform(10, 17, 8)]
    mel, workspace = LogMel(SAMPLE_RATE), fbank.Workspace()
    if variant == "plain":
        def compute(wave):
            reference.reference_log_mel(mel, wave)
    else:
        block = {"whole": 1 << 30}.get(variant) or int(variant.split()[-1])

        def compute(wave):
            fbank.utterance_log_mel(mel, wave, mel.num_frames(len(wave)), None, workspace, block=block)
    for wave in waves[:2]:
        compute(wave)
    barrier.wait(timeout=300)
    audio, cpu, wall, i = 0.0, time.process_time(), time.perf_counter(), 0
    while time.perf_counter() - wall < seconds:
        compute(waves[i % len(waves)])
        audio += len(waves[i % len(waves)]) / SAMPLE_RATE
        i += 1
    queue.put((audio / (time.process_time() - cpu), audio / (time.perf_counter() - wall)))


class ThreadProbe:
    """Indexer whose batch is the building worker's thread counts, torch imported by the batch."""

    def __getitem__(self, ids):
        import torch
        from speechiter.sequence.threads import thread_counts
        torch.ones(8).sum()
        return thread_counts()
