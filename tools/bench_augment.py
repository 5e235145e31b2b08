"""Augmentation benchmark, side by side in one run (ratios mean more than absolute times).

    python tools/bench_augment.py                       # 300 utterances, 2 workers, 120 s batches
    python tools/bench_augment.py --workers 4 --num 600 --epochs 3
    python tools/bench_augment.py --no_lhotse

One corpus from tools/make_corpus.py (LibriSpeech-like durations, 16 kHz wav),
a noise list (``--noises`` files of 2-20 s) and an RIR list (``--rirs``
decaying-noise RIRs of 0.3-0.6 s). Three loaders with the same workers
(processes) and batch budget (``--batch_seconds`` of audio), 80-bin log-mel
features computed in the workers:

- ``plain``: speechiter, no augmentation;
- ``augmented``: speechiter with noise (p 0.8, SNR 5-20 dB), reverb (p 0.5),
  gain (-6..6 dB) and SpecAugment (2 x 27 bins, 2 x 5% of the frames);
- ``lhotse``: Lhotse's K2SpeechRecognitionDataset on a torch DataLoader with
  the same chain: CutMix (p 0.8, SNR 5-20, random offsets),
  ReverbWithImpulseResponse (p 0.5), PerturbVolume (the same gain range, as
  factors) and SpecAugment (no time warp, 2 x 27 bins, 2 frame masks of at
  most 5%), OnTheFlyFeatures(Fbank 80 bins), SimpleCutSampler(max_duration).

Each prints seconds of audio loaded per second of wall time in steady state:
the median over ``--epochs`` epochs run interleaved (one epoch of each in
turn, after a warm-up epoch), then the ratios augmented / plain (target
>= 0.70) and augmented / lhotse (target >= 2).
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from speechiter.dataset.speech_text import SpeechTextDataset  # noqa: E402
from speechiter.iterator.block import BlockIterator  # noqa: E402

RATE = 16000
FRAMES_PER_SECOND = 100
SNR, NOISE_PROB, REVERB_PROB, GAIN_DB = (5, 20), 0.8, 0.5, (-6, 6)
FREQ_MASKS, FREQ_WIDTH, TIME_MASKS, TIME_WIDTH = 2, 27, 2, 0.05


def load_tool(name):
    sys.path.insert(0, str(REPO / "tools"))
    import importlib
    return importlib.import_module(name)


def write_noise_and_rirs(root: Path, noises: int, rirs: int, seed: int = 7):
    """``(noise idx2wav, rir idx2wav)``: 16-bit wav files, noise of 2-20 s, RIRs of 0.3-0.6 s."""
    rng = np.random.default_rng(seed)
    lists = {}
    for kind, count in (("noise", noises), ("rir", rirs)):
        folder = root / kind
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(count):
            if kind == "noise":
                wave = np.cumsum(rng.standard_normal(int(rng.uniform(2, 20) * RATE))) * 0.01  # brown-ish
                wave = 0.3 * (wave - np.convolve(wave, np.ones(400) / 400, "same")) / (np.abs(wave).max() + 1e-9)
            else:
                n = int(rng.uniform(0.3, 0.6) * RATE)
                wave = rng.standard_normal(n) * np.exp(-np.arange(n) / rng.uniform(0.03, 0.12) / RATE) * 0.3
                wave[int(rng.integers(20, 80))] = 0.9
            sf.write(folder / f"{kind}{i:03d}.wav", np.clip(wave, -1, 1), RATE, subtype="PCM_16")
            lines.append(f"{kind}{i:03d} {kind}{i:03d}.wav\n")
        (folder / "idx2wav").write_text("".join(lines))
        lists[kind] = folder / "idx2wav"
    return lists["noise"], lists["rir"]


def speechiter_iterator(corpus: Path, workers: int, batch_seconds: float, augment=None):
    conf = {"main_data": {"feat": str(corpus / "idx2wav"), "text": str(corpus / "idx2text")},
            "sample_rate": RATE, "feat_conf": {"n_mels": 80}}
    if augment:
        conf["augment"] = augment
    return BlockIterator(dataset_type=SpeechTextDataset, dataset_conf=conf, data_len=str(corpus / "idx2wav_len"),
                         batch_len=batch_seconds * FRAMES_PER_SECOND, num_workers=workers, out_type="cpu",
                         engine="msequence", thread_type="proc")


def chain(noise: Path, rir: Path):
    return [{"type": "noise", "noise": str(noise), "snr": list(SNR), "prob": NOISE_PROB},
            {"type": "reverb", "rir": str(rir), "prob": REVERB_PROB},
            {"type": "gain", "db": list(GAIN_DB), "prob": 1.0},
            {"type": "spec_augment", "freq_masks": FREQ_MASKS, "freq_width": FREQ_WIDTH, "time_masks": TIME_MASKS,
             "time_width": TIME_WIDTH}]


class SpeechiterRun:
    def __init__(self, iterator):
        self.iterator = iterator

    def epoch(self, epoch: int) -> float:
        """Audio seconds of one epoch."""
        return sum(int(b["feat_len"].sum()) for b in self.iterator.build_loader(epoch)) / FRAMES_PER_SECOND

    def close(self):
        self.iterator.close()


class LhotseRun:
    """The same chain with Lhotse (built outside the timed epochs)."""

    def __init__(self, corpus: Path, noise: Path, rir: Path, workers: int, batch_seconds: float):
        import torch
        from lhotse import CutSet, Fbank, FbankConfig, Recording, RecordingSet, SupervisionSegment, SupervisionSet
        from lhotse.dataset import (CutMix, K2SpeechRecognitionDataset, OnTheFlyFeatures, PerturbVolume,
                                    SimpleCutSampler, SpecAugment)
        from lhotse.dataset.cut_transforms import ReverbWithImpulseResponse

        def recordings(idx2wav: Path):
            return RecordingSet.from_recordings(
                Recording.from_file(idx2wav.parent / value, recording_id=uid)
                for uid, value in (line.split(maxsplit=1) for line in idx2wav.read_text().splitlines()))

        speech = recordings(corpus / "idx2wav")
        texts = dict(line.split(maxsplit=1) for line in (corpus / "idx2text").read_text().splitlines())
        supervisions = SupervisionSet.from_segments(
            SupervisionSegment(id=r.id, recording_id=r.id, start=0, duration=r.duration, text=texts[r.id])
            for r in speech)
        cuts = CutSet.from_manifests(recordings=speech, supervisions=supervisions).to_eager()
        noise_cuts = CutSet.from_manifests(recordings=recordings(noise)).to_eager()
        gain = [10 ** (db / 20) for db in GAIN_DB]
        dataset = K2SpeechRecognitionDataset(
            cut_transforms=[CutMix(noise_cuts, snr=SNR, p=NOISE_PROB, random_mix_offset=True, preserve_id=True),
                            ReverbWithImpulseResponse(recordings(rir), p=REVERB_PROB, preserve_id=True),
                            PerturbVolume(p=1.0, scale_low=gain[0], scale_high=gain[1], preserve_id=True)],
            input_transforms=[SpecAugment(time_warp_factor=None, num_feature_masks=FREQ_MASKS,
                                          features_mask_size=FREQ_WIDTH, num_frame_masks=TIME_MASKS,
                                          max_frames_mask_fraction=TIME_WIDTH, p=1.0)],
            input_strategy=OnTheFlyFeatures(Fbank(FbankConfig(num_mel_bins=80))))
        self.sampler = SimpleCutSampler(cuts, max_duration=batch_seconds, shuffle=True)
        self.loader = torch.utils.data.DataLoader(dataset, sampler=self.sampler, batch_size=None,
                                                  num_workers=workers, persistent_workers=True)

    def epoch(self, epoch: int) -> float:
        self.sampler.set_epoch(epoch)
        return sum(float(b["supervisions"]["num_frames"].sum()) for b in self.loader) / FRAMES_PER_SECOND

    def close(self):
        del self.loader


def bench(runs, epochs: int):
    """{name: median audio s/s}: a warm-up epoch each, then ``epochs`` epochs of each in turn."""
    rates = {name: [] for name in runs}
    for name, run in runs.items():
        run.epoch(1)
    for epoch in range(2, 2 + epochs):
        for name, run in runs.items():
            start = time.perf_counter()
            audio = run.epoch(epoch)
            rates[name].append(audio / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num", type=int, default=300, help="utterances in the corpus")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch_seconds", type=float, default=120.0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--noises", type=int, default=30)
    parser.add_argument("--rirs", type=int, default=20)
    parser.add_argument("--no_lhotse", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = load_tool("make_corpus").make_corpus(tmp / "corpus", args.num, fmt="wav", sample_rate=RATE)
        noise, rir = write_noise_and_rirs(tmp, args.noises, args.rirs)
        runs = {"plain": SpeechiterRun(speechiter_iterator(corpus, args.workers, args.batch_seconds)),
                "augmented": SpeechiterRun(speechiter_iterator(corpus, args.workers, args.batch_seconds,
                                                               chain(noise, rir)))}
        if not args.no_lhotse:
            runs["lhotse"] = LhotseRun(corpus, noise, rir, args.workers, args.batch_seconds)
        try:
            rates = bench(runs, args.epochs)
        finally:
            for run in runs.values():
                run.close()
    print(f"{args.num} utterances, {args.workers} worker processes, {args.batch_seconds:g} s batches, 80-bin "
          f"log-mel; median of {args.epochs} epochs (audio seconds per second)")
    for name, rate in rates.items():
        print(f"  {name:<10} {rate:9.0f}")
    print(f"  augmented / plain:  {rates['augmented'] / rates['plain']:.2f}  (target >= 0.70)")
    if "lhotse" in rates:
        print(f"  augmented / lhotse: {rates['augmented'] / rates['lhotse']:.2f}  (target >= 2)")
    return rates


if __name__ == "__main__":
    main()
