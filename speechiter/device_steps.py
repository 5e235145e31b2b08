"""Device steps: work a batch asks to be done where it is delivered, after the worker.

A dataset may leave the last step of a batch to the converter (NOTE [ CUDA
copies ] in speechiter/sequence/convert.py): log-mel computed on the GPU from the padded waveform
batch, for one (speechiter/gpu_features.py). Its batch (a dict) then carries,
under :data:`DEVICE_STEPS`, a list of picklable callables
``step(batch, device) -> batch``; the converter (or the torch engine) removes
the key and calls each step once the batch's arrays are tensors on ``device``:
the cuda device of a cuda out_type (on the converter's side stream), the CPU
for 'cpu', and None for 'null' (compute on the CPU, give numpy arrays back).
The engine knows nothing else of them.
"""
DEVICE_STEPS = "__device_steps__"


def run_device_steps(batch, device):
    """``batch`` after the steps it carries (none: as it is)."""
    if type(batch) is not dict or DEVICE_STEPS not in batch:
        return batch
    steps = batch.pop(DEVICE_STEPS)
    for step in steps:
        batch = step(batch, device)
    return batch
