"""Write the length file of an idx2wav file, from headers, without decoding.

    python tools/data_len.py data/train/idx2wav                 # -> data/train/idx2wav_len
    python tools/data_len.py data/train/idx2wav --sample_rate 16000 -o idx2wav_len_16k

Each line of the output is ``<id> <num_frames>``, in the order of the input.
Frames come from audio headers (soundfile.info), HDF5 dataset shapes
(``file.hdf5:key``) and npy/npz array shapes; relative paths resolve against
the idx2 file's folder. With ``--sample_rate SR`` the length of audio stored at
another rate (or of an HDF5 dataset with a ``sample_rate`` attribute) is
``round(n * SR / sr)``, exactly the length ``speechiter.io.read.read_feat(...,
sample_rate=SR)`` returns; npy/npz lengths are written as they are (read_feat
does not resample them either). Kaldi piped values (``sox a.wav -t wav -r 8000
- |``, NOTE [ Piped values ] in speechiter/io/pipes.py) count the command's
output; commands speechiter does not read natively are refused unless
``--allow_commands`` (which runs them: arbitrary shell). For a Kaldi
``segments`` file, the wav.scp beside it is read first, so its errors name its
line, not an utterance.

Exit 0 on success, 2 with one line on stderr for bad input.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

try:
    import speechiter  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speechiter.io.kaldi_segments import check_wav_scp, is_kaldi_segments
from speechiter.io.read import data_num_frames
from speechiter.io.samples import resampled_length
from speechiter.errors import DataError
from speechiter.idx2 import read_idx2
from speechiter.paths import resolve_data_path


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line on stderr, exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def default_output(idx2wav):
    """``<folder of idx2wav>/<its name>_len``."""
    idx2wav = Path(idx2wav)
    return idx2wav.with_name(idx2wav.name + "_len")


def data_lengths(idx2wav, sample_rate=None, allow_commands=False):
    """``(ids, lengths)`` of the entries of ``idx2wav``. Raises DataError
    naming the idx2 file and the utterance for an entry it cannot measure."""
    if sample_rate is not None and sample_rate <= 0:
        raise DataError(f"sample_rate should be a positive integer, but got sample_rate={sample_rate}")
    ids, values = read_idx2(idx2wav)
    if is_kaldi_segments(os.fspath(idx2wav)):  # the wav.scp behind every utterance: its errors are its own
        check_wav_scp(os.path.join(os.path.dirname(os.fspath(idx2wav)), "wav.scp"), allow_commands,
                      "pass --allow_commands")
    lengths = []
    for utt_id, value in zip(ids, values):
        try:
            frames, rate = data_num_frames(resolve_data_path(value, idx2wav), allow_commands)
        except DataError as e:
            raise DataError(f"{idx2wav}: utterance {utt_id!r}: {e}") from None
        if sample_rate is not None and rate is not None and rate != sample_rate:
            frames = resampled_length(frames, rate, sample_rate)
        lengths.append(frames)
    return ids, lengths


def data_len(idx2wav, out=None, sample_rate=None, allow_commands=False):
    """Write the length file of ``idx2wav`` and return its path."""
    out = Path(out) if out is not None else default_output(idx2wav)
    ids, lengths = data_lengths(idx2wav, sample_rate, allow_commands)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(f"{i} {n}\n" for i, n in zip(ids, lengths)))
        os.replace(tmp, out)
    except OSError as e:
        raise DataError(f"{out}: cannot write ({e.strerror or e})") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def main(argv=None):
    parser = _Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("idx2wav", help="idx2 file of audio paths (or file.hdf5:key entries)")
    parser.add_argument("-o", "--out", help="output file (default: <idx2wav>_len next to it)")
    parser.add_argument("--sample_rate", type=int, help="write lengths at this rate (Hz)")
    parser.add_argument("--allow_commands", action="store_true",
                        help="run piped commands that are not read natively (arbitrary shell: only for data you "
                             "trust)")
    args = parser.parse_args(argv)
    try:
        out = data_len(args.idx2wav, args.out, args.sample_rate, args.allow_commands)
    except DataError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
