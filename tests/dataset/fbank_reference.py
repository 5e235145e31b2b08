"""LogMel's arithmetic as it was written before NOTE [ Log-mel memory traffic ] (speechiter/fbank.py): one
torch expression per step on the whole utterance. The features of the blocked kernel must equal its bits."""
import numpy as np
import torch

from speechiter.io.pcm import PCM16_SCALE

EPS = float(np.finfo(np.float32).eps)


def reference_log_mel(mel, wave, generator=None):
    wave = np.asarray(wave, dtype=np.float32).reshape(-1)
    if mel.num_frames(wave.shape[0]) == 0:
        return np.zeros((0, mel.n_mels), dtype=np.float32)
    with torch.no_grad():
        x = torch.from_numpy(wave * np.float32(PCM16_SCALE))
        frames = x.unfold(0, mel.window_size, mel.window_shift)
        if mel.dither > 0:
            noise = generator.standard_normal(tuple(frames.shape), dtype=np.float32)
            frames = frames + torch.from_numpy(noise) * mel.dither
        if mel.remove_dc_offset:
            frames = frames - frames.mean(dim=1, keepdim=True)
        if mel.preemphasis:
            first = frames[:, :1] * (1 - mel.preemphasis)
            frames = torch.cat([first, frames[:, 1:] - mel.preemphasis * frames[:, :-1]], dim=1)
        spectrum = torch.fft.rfft(frames * mel.window_tensor, n=mel.n_fft)
        power = spectrum.real.square() + spectrum.imag.square()
        feat = (power @ mel.banks_tensor).clamp_min(EPS).log()
        if mel.normalize == "utterance":
            mean = feat.mean(dim=0, keepdim=True)
            std = feat.std(dim=0, unbiased=False, keepdim=True)
            feat = (feat - mean) / std.clamp_min(1e-5)
        return feat.numpy().astype(np.float32, copy=False)
