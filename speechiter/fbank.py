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
about 16 KB per 10 ms frame, so a 15 s utterance allocates and streams 24 MB,
mostly fresh memory the kernel must zero; on a 16-core node every worker
doing that at once ran at 0.41 of its one-worker rate (issue 29). Here:

- the frames are processed in blocks of :data:`BLOCK_FRAMES` (the noise,
  frames, FFT input and spectrum of a block, ~8 KB a frame, stay in a core's
  cache rather than streaming a whole utterance's through memory); only the
  scaled waveform, the power spectrum (1 KB per frame) and the output are
  whole-utterance arrays, so the mel matrix product is the same single product
  as before (blocked products round differently);
- every buffer comes from a :class:`Workspace` reused across utterances (no
  allocation, no page fault per utterance);
- each step writes in place (``out=``, ``mul_``): no temporaries.

A block costs a few dozen torch calls: on one core, blocks of 128 frames cost
~35% more time than one block per utterance, 512 frames ~3% (a loaded 2-core
VM; tools/bench_node.py measures every size in 1 to cores-2 processes at
once, which is what the block size is for).

The operations, their order and their inputs' layouts are those of the plain
version (the FFT gives the same bits for any number of rows: tested), so the
features are bit-identical to it (tests/dataset/test_features_identity.py).
"""
import threading

import numpy as np

from speechiter.io.pcm import PCM16_SCALE

#: frames per block: ~4 MB of buffers at 25 ms / 10 ms / a 512-point FFT (see NOTE [ Log-mel memory traffic ])
BLOCK_FRAMES = 512
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
        count = int(np.prod(shape))
        buffer = buffers.get(name)
        if buffer is None or buffer.numel() < count or buffer.dtype != dtype:
            size = max(count, 2 * buffer.numel() if buffer is not None and buffer.dtype == dtype else 0)
            buffer = buffers[name] = (torch.zeros if zeroed else torch.empty)(size, dtype=dtype)
        return buffer[:count].view(shape)

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.__init__()


def utterance_log_mel(mel, wave: np.ndarray, frames_n: int, generator, workspace: Workspace,
                      block: int = BLOCK_FRAMES):
    """Log-mel ``(frames_n, n_mels)`` float32 numpy of ``wave`` (1-D float32, at least one frame) with
    ``mel``'s settings (a LogMel). See NOTE [ Log-mel memory traffic ]."""
    import torch

    size, shift, p = mel.window_size, mel.window_shift, mel.preemphasis
    bins = mel.n_fft // 2 + 1
    with torch.no_grad():
        x = workspace.get("wave", (wave.shape[0],), torch.float32)
        np.multiply(wave, np.float32(PCM16_SCALE), out=x.numpy())
        power = workspace.get("power", (frames_n, bins), torch.float32)
        for start in range(0, frames_n, block):
            n = min(block, frames_n - start)
            frames = x[start * shift:start * shift + (n - 1) * shift + size].unfold(0, size, shift)
            own = workspace.get("frames", (n, size), torch.float32)
            if mel.dither > 0:
                noise = workspace.get("noise", (n, size), torch.float32)
                generator.standard_normal(dtype=np.float32, out=noise.numpy())
                frames = torch.add(frames, noise.mul_(mel.dither), out=own)
            if mel.remove_dc_offset:
                frames = torch.sub(frames, frames.mean(dim=1, keepdim=True), out=own)
            padded = workspace.get("padded", (n, mel.n_fft), torch.float32, zeroed=True)  # columns >= size stay 0
            windowed = padded[:, :size]
            if p:
                torch.mul(frames[:, :-1], p, out=windowed[:, 1:])
                torch.sub(frames[:, 1:], windowed[:, 1:], out=windowed[:, 1:])
                torch.mul(frames[:, :1], 1 - p, out=windowed[:, :1])
            else:
                windowed.copy_(frames)
            windowed.mul_(mel.window_tensor)
            spectrum = torch.fft.rfft(padded, out=workspace.get("spectrum", (n, bins), torch.complex64))
            square = workspace.get("square", (n, bins), torch.float32)
            rows = power[start:start + n]
            torch.mul(spectrum.real, spectrum.real, out=rows)
            rows.add_(torch.mul(spectrum.imag, spectrum.imag, out=square))
        feat = torch.matmul(power, mel.banks_tensor).clamp_min_(EPS).log_()
        if mel.normalize == "utterance":
            mean = feat.mean(dim=0, keepdim=True)
            std = feat.std(dim=0, unbiased=False, keepdim=True)
            feat = (feat - mean) / std.clamp_min(NORM_EPS)
        return feat.numpy()
