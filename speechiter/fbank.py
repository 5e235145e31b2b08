"""The fbank arithmetic of :class:`speechiter.features.LogMel`, on torch tensors.

:func:`utterance_log_mel` is the worker's kernel: one utterance on the CPU,
bit for bit the arithmetic of NOTE [ Kaldi-compatible fbank with torch ] in
features.py. :func:`batch_log_mel` (gpu_features.py) does the same on a padded
batch, on any device.

NOTE [ Log-mel memory traffic ]
Written plainly, an utterance's log-mel makes a dozen temporaries of its
frames' size (the scaled waveform, dither noise, the DC-free frames, the
pre-emphasis product and difference, their concatenation, the windowed
frames, the zero-padded FFT input, the spectrum, two squares and their sum):
about 16 KB per 10 ms frame, so a 15 s utterance allocates and streams 24 MB
(a warm worker's heap serves it without page faults: 0-12 per second of
audio, 70-120 in a fresh process), each temporary written once and read back.
On a 16-core node every worker doing that at once ran at 0.41 of its
one-worker rate (issue 29), the mark of work bound by memory traffic. Here:

- the frames are processed in blocks of :data:`BLOCK_FRAMES` (the noise,
  frames, FFT input and spectrum of a block, ~8 KB a frame, stay in a core's
  cache rather than streaming a whole utterance's through memory); only the
  scaled waveform, the power spectrum (1 KB per frame) and the output are
  whole-utterance arrays, so the mel matrix product is the same single product
  as before (blocked products round differently);
- every buffer comes from a :class:`Workspace` reused across utterances (no
  allocation, no page fault per utterance);
- each step writes in place (``out=``, ``mul_``): no temporaries.

On one core the kernel is compute-bound and blocks cost calls (a dozen per
block, about a microsecond each). In a worker's batch path, µs of CPU per
second of audio on a loaded 2-core VM (two runs): plain 341-391, one block per
utterance 331-350, blocks of 256 frames 353-411, 512 382-398, 128 469-588.
What blocks buy is memory traffic when every core runs a worker: about 3 KB
per frame leave the cache at 256 frames, 9 KB with one block per utterance,
16 KB plain. tools/bench_node.py measures each size in 1 to cores-2
processes at once on a node; :data:`BLOCK_FRAMES` should follow it.

The operations, their order and their inputs' layouts are those of the plain
version (the FFT gives the same bits for any number of rows: tested), so the
features are bit-identical to it (tests/dataset/test_features_identity.py).
"""
import threading

import numpy as np

from speechiter.io.pcm import PCM16_SCALE

#: frames per block: ~2 MB of buffers at 25 ms / 10 ms / a 512-point FFT (see NOTE [ Log-mel memory traffic ])
BLOCK_FRAMES = 256
EPS = float(np.finfo(np.float32).eps)  # Kaldi's log floor
NORM_EPS = 1e-5


class Workspace:
    """Buffers kept for the next utterance, one set per thread; grown (never shrunk) to the largest asked for.
    Not pickled: a worker makes its own."""

    def __init__(self):
        self._local = threading.local()

    def get(self, name: str, shape, dtype, zeroed: bool = False):
        """A C-contiguous torch tensor of ``shape`` at the start of buffer ``name`` (stale values, or zeros
        when the buffer is made: ``zeroed`` buffers keep the zeros the caller never writes)."""
        import torch
        buffers = self._local.__dict__.setdefault("buffers", {})
        count = 1
        for n in shape:
            count *= n
        buffer = buffers.get(name)
        if buffer is None or buffer.numel() < count or buffer.dtype != dtype:
            size = max(count, 2 * buffer.numel() if buffer is not None and buffer.dtype == dtype else 0)
            buffer = buffers[name] = (torch.zeros if zeroed else torch.empty)(size, dtype=dtype)
        return buffer[:count].view(shape)

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.__init__()


class _Block:
    """The buffers of a block of ``rows`` frames, and the views each step writes (made once per utterance,
    not per block: a torch call costs about a microsecond)."""

    def __init__(self, workspace: Workspace, rows: int, mel, bins: int):
        import torch
        size = mel.window_size
        self.rows = rows
        self.own = workspace.get("frames", (rows, size), torch.float32)
        self.own_parts = (self.own[:, :-1], self.own[:, 1:], self.own[:, :1])
        self.noise = workspace.get("noise", (rows, size), torch.float32) if mel.dither > 0 else None
        self.padded = workspace.get("padded", (rows, mel.n_fft), torch.float32, zeroed=True)  # cols >= size: 0
        self.windowed = self.padded[:, :size]
        self.windowed_parts = (self.windowed[:, 1:], self.windowed[:, :1])
        self.spectrum = workspace.get("spectrum", (rows, bins), torch.complex64)
        self.real, self.imag = self.spectrum.real, self.spectrum.imag
        self.square = workspace.get("square", (rows, bins), torch.float32)


def utterance_log_mel(mel, wave: np.ndarray, frames_n: int, generator, workspace: Workspace,
                      block: int = BLOCK_FRAMES):
    """Log-mel ``(frames_n, n_mels)`` float32 numpy of ``wave`` (1-D float32, at least one frame) with
    ``mel``'s settings (a LogMel). See NOTE [ Log-mel memory traffic ]."""
    import torch

    p, bins = mel.preemphasis, mel.n_fft // 2 + 1
    with torch.no_grad():
        x = workspace.get("wave", (wave.shape[0],), torch.float32)
        np.multiply(wave, np.float32(PCM16_SCALE), out=x.numpy())
        framed = x.unfold(0, mel.window_size, mel.window_shift)  # (frames, window), a view
        power = workspace.get("power", (frames_n, bins), torch.float32)
        full = _Block(workspace, min(block, frames_n), mel, bins)
        for start in range(0, frames_n, block):
            n = min(block, frames_n - start)
            b = full if n == full.rows else _Block(workspace, n, mel, bins)
            frames = framed[start:start + n]
            if b.noise is not None:
                generator.standard_normal(dtype=np.float32, out=b.noise.numpy())
                frames = torch.add(frames, b.noise.mul_(mel.dither), out=b.own)
            if mel.remove_dc_offset:
                frames = torch.sub(frames, frames.mean(dim=1, keepdim=True), out=b.own)
            if p:
                head, tail, first = b.own_parts if frames is b.own else (frames[:, :-1], frames[:, 1:], frames[:, :1])
                torch.mul(head, p, out=b.windowed_parts[0])
                torch.sub(tail, b.windowed_parts[0], out=b.windowed_parts[0])
                torch.mul(first, 1 - p, out=b.windowed_parts[1])
            else:
                b.windowed.copy_(frames)
            b.windowed.mul_(mel.window_tensor)
            torch.fft.rfft(b.padded, out=b.spectrum)
            rows = power[start:start + n]
            torch.mul(b.real, b.real, out=rows)
            rows.add_(torch.mul(b.imag, b.imag, out=b.square))
        feat = torch.matmul(power, mel.banks_tensor).clamp_min_(EPS).log_()
        if mel.normalize == "utterance":
            mean = feat.mean(dim=0, keepdim=True)
            std = feat.std(dim=0, unbiased=False, keepdim=True)
            feat = (feat - mean) / std.clamp_min(NORM_EPS)
        return feat.numpy()
