"""Noise and RIR corpora for the augmentation tests: real files in tmp_path, an idx2wav per list."""
import numpy as np
import soundfile as sf

PRESET = "config/feat/log_mel/80bin_25ms_10ms.yaml"


def write_list(root, name, waves, sample_rate=16000, subtype="FLOAT"):
    """``waves`` (arrays, (T,) or (T, C)) as ``<root>/<name>/<name><i>.wav`` and their idx2wav; returns its path."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, wave in enumerate(waves):
        sf.write(folder / f"{name}{i}.wav", wave, sample_rate, subtype=subtype)
        lines.append(f"{name}{i} {name}{i}.wav\n")
    (folder / "idx2wav").write_text("".join(lines))
    return folder / "idx2wav"


def noise_waves(count=3, seconds=(0.3, 2.0, 0.9), seed=1, sample_rate=16000):
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(int(seconds[i % len(seconds)] * sample_rate))).astype(np.float32)
            for i in range(count)]


def rir_waves(count=2, seconds=0.25, seed=2, sample_rate=16000):
    """Decaying noise with a direct path a few ms in."""
    rng = np.random.default_rng(seed)
    waves = []
    for i in range(count):
        n = int(seconds * sample_rate)
        rir = rng.standard_normal(n) * np.exp(-np.arange(n) / (0.05 * sample_rate)) * 0.2
        rir[40 + 10 * i] = 1.0
        waves.append(rir.astype(np.float32))
    return waves


def chain(root, spec_augment=True, noise_prob=0.8, reverb_prob=0.5):
    """The issue's chain over lists written under ``root`` (a dataset_conf ``augment`` value)."""
    steps = [{"type": "noise", "noise": str(write_list(root, "noise", noise_waves())), "snr": [5, 20],
              "prob": noise_prob},
             {"type": "reverb", "rir": str(write_list(root, "rir", rir_waves())), "prob": reverb_prob},
             {"type": "gain", "db": [-6, 6], "prob": 1.0}]
    if spec_augment:
        steps.append({"type": "spec_augment", "freq_masks": 2, "freq_width": 27, "time_masks": 2,
                      "time_width": 0.05})
    return steps
