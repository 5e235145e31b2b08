class Resample:
    def __init__(self, orig_freq=16000, new_freq=16000, **kwargs):
        self.orig_freq, self.new_freq = orig_freq, new_freq

    def __call__(self, wav):
        raise RuntimeError("torchaudio stub: resampling is not part of batching")
