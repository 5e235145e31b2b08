"""Stub: librosa is imported by speechain.utilbox.feat_util but not used for batching."""
def __getattr__(name):
    raise RuntimeError(f"librosa stub: librosa.{name}")
