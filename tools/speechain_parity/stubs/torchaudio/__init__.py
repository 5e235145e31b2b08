"""Stub: SpeeChain's batching never calls torchaudio (only waveform resampling does)."""
from . import transforms, functional  # noqa: F401
