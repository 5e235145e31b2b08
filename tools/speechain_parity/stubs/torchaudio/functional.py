def __getattr__(name):
    raise RuntimeError(f"torchaudio stub: functional.{name}")
