"""Pack a corpus into HDF5 chunk files, with the matching idx2 and length files.

    python tools/pack_hdf5.py data/train/idx2wav data/train_h5                  # int16 waveforms
    python tools/pack_hdf5.py data/train/idx2wav out --dtype float32 --sample_rate 16000
    python tools/pack_hdf5.py data/train/idx2wav out --features config/feat/log_mel/80bin_25ms_10ms.yaml \\
        --sample_rate 16000

Writes ``OUT_DIR/chunk_000.hdf5``, ``chunk_001.hdf5``, ... with ``--chunk_size``
utterances each (one dataset per utterance, named by its id), and:

- waveforms: ``OUT_DIR/idx2wav`` (``<id> chunk_000.hdf5:<id>``, relative to
  OUT_DIR) and ``OUT_DIR/idx2wav_len`` (samples). Each dataset is (T,) for mono,
  (T, C) otherwise, int16 (``--dtype int16``, the default: 16-bit sources are
  stored losslessly and read back exactly like the files) or float32, with a
  ``sample_rate`` attribute (so ``sample_rate:`` in a recipe resamples them).
- features (``--features FEAT_CONF``, a feat_conf YAML file): log-mel frames
  (frames, n_mels) float32, ``OUT_DIR/idx2feat`` and ``OUT_DIR/idx2feat_len``
  (frames). The audio is resampled to the features' rate first (feat_conf
  ``sample_rate`` or ``--sample_rate``); ``dither`` must be 0.

With ``--sample_rate`` waveforms are resampled (soxr, as read_feat does) before
packing. Other idx2 files (text, speakers) are not touched: point main_data at
the originals. Exit 0 on success, 2 with one line on stderr for bad input.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import soundfile

try:
    import speechiter  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speechiter.io.pcm import PCM16_SCALE
from speechiter.io.read import data_num_frames, read_feat
from speechiter.errors import ConfigError, DataError
from speechiter.features import LogMel, load_feat_conf
from speechiter.idx2 import read_idx2
from speechiter.io.source import split_chunk_key
from speechiter.paths import resolve_data_path


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line on stderr, exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _read_waveform(path, dtype, sample_rate):
    """(array, rate) of one utterance: int16 straight from 16-bit files when
    possible (exact), else float32 through read_feat (converted if needed)."""
    file, key = split_chunk_key(path)
    frames, rate = data_num_frames(path)
    resample = sample_rate is not None and rate is not None and rate != sample_rate
    if key is None and dtype == "int16" and not resample and os.path.splitext(file)[1].lower() not in (".npy", ".npz"):
        try:
            return soundfile.read(file, dtype="int16", always_2d=True)[0], rate
        except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
            raise DataError(f"{file}: cannot read audio ({e})") from None
    x = read_feat(path, sample_rate)
    if dtype == "int16":
        x = np.clip(np.round(x * PCM16_SCALE), -PCM16_SCALE, PCM16_SCALE - 1).astype(np.int16)
    return x, sample_rate if resample else rate


def pack(idx2wav, out_dir, chunk_size=500, dtype="int16", sample_rate=None, features=None):
    """Pack ``idx2wav`` into ``out_dir``; returns the idx2 file written."""
    import h5py

    if chunk_size <= 0:
        raise DataError(f"chunk_size should be a positive integer, but got chunk_size={chunk_size}")
    if sample_rate is not None and sample_rate <= 0:
        raise DataError(f"sample_rate should be a positive integer, but got sample_rate={sample_rate}")
    extractor = None
    if features is not None:
        try:
            extractor = LogMel.from_conf(load_feat_conf(os.fspath(features)), sample_rate)
        except ConfigError as e:
            raise DataError(f"{features}: {e}") from None
        if extractor.dither:
            raise DataError(f"{features}: dither must be 0 for stored features, got {extractor.dither}")
        sample_rate = extractor.sample_rate
    ids, values = read_idx2(idx2wav)
    bad = next((uid for uid in ids if "/" in uid), None)
    if bad is not None:
        raise DataError(f"{idx2wav}: id {bad!r} contains '/', which HDF5 reads as a group path")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "idx2feat" if extractor else "idx2wav"
    entries, lengths = [], []
    for start in range(0, len(ids), chunk_size):
        chunk = f"chunk_{start // chunk_size:03d}.hdf5"
        with h5py.File(out_dir / chunk, "w") as h5:
            for uid, value in zip(ids[start:start + chunk_size], values[start:start + chunk_size]):
                path = resolve_data_path(value, idx2wav)
                try:
                    if extractor is not None:
                        wave = read_feat(path, sample_rate)
                        if wave.shape[1] != 1 or wave.shape[0] < extractor.window_size:
                            raise DataError(f"expected mono audio of at least {extractor.window_size} samples, "
                                            f"got shape {wave.shape}")
                        array, rate = extractor(wave), None
                    else:
                        array, rate = _read_waveform(path, dtype, sample_rate)
                        array = array.astype(dtype, copy=False)
                except DataError as e:
                    raise DataError(f"{idx2wav}: utterance {uid!r}: {e}") from None
                dataset = h5.create_dataset(uid, data=array[:, 0] if array.shape[1] == 1 and rate else array)
                if rate is not None:
                    dataset.attrs["sample_rate"] = int(rate)
                entries.append(f"{uid} {chunk}:{uid}\n")
                lengths.append(f"{uid} {array.shape[0]}\n")
    (out_dir / name).write_text("".join(entries), encoding="utf-8")
    (out_dir / f"{name}_len").write_text("".join(lengths), encoding="utf-8")
    return out_dir / name


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("idx2wav", help="idx2 file of audio paths (or file.hdf5:key entries)")
    parser.add_argument("out_dir", help="folder for the chunk files and the idx2 files")
    parser.add_argument("--chunk_size", type=int, default=500, help="utterances per chunk file (500)")
    parser.add_argument("--dtype", choices=("int16", "float32"), default="int16", help="waveform type (int16)")
    parser.add_argument("--sample_rate", type=int, help="resample to this rate (Hz) before packing")
    parser.add_argument("--features", help="a feat_conf YAML file: store log-mel frames instead")
    args = parser.parse_args(argv)
    try:
        out = pack(args.idx2wav, args.out_dir, args.chunk_size, args.dtype, args.sample_rate, args.features)
    except DataError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} and {out}_len")
    return 0


if __name__ == "__main__":
    sys.exit(main())
