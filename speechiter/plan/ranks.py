"""This process's rank and the world size, from the options or torch.distributed, and this rank's view."""
import warnings
from typing import Optional, Tuple

import numpy as np

from speechiter.checks import check_int
from speechiter.errors import ConfigError
from speechiter.plan.view import BatchView, distribute, make_divisible, padding_rows


def resolve_rank(distributed: bool, rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    """``(rank, world_size)``: the given ones if either is set, else
    torch.distributed's when ``distributed``, else ``(0, 1)``."""
    if rank is not None or world_size is not None:
        rank, world_size = int(rank or 0), 1 if world_size is None else check_int(world_size, "world_size")
    elif distributed:
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise ConfigError("distributed", "is true but torch.distributed is not initialised "
                                             "(run under torchrun with --distributed)")
        rank, world_size = dist.get_rank(), dist.get_world_size()
    else:
        rank, world_size = 0, 1
    if not 0 <= rank < world_size:
        raise ConfigError("rank", f"expected 0 <= rank < world_size={world_size}, got {rank}")
    return rank, world_size


_WARNED = set()  # (iterator name, ngpu, world size) already warned about, once per process


def share_view(view: BatchView, ngpu: int, rank: int, world_size: int, descending: bool, evaluation: bool,
               name: str) -> BatchView:
    """This rank's view (see :func:`speechiter.plan.view.distribute`); on rank 0, a warning
    that says what a mismatch between ``ngpu`` and the world size costs."""
    if world_size > 1 and ngpu != world_size and rank == 0 and (name, ngpu, world_size) not in _WARNED:
        sizes = (make_divisible(view, ngpu) if ngpu > 1 else view).sizes()
        uneven = int(np.count_nonzero(sizes % world_size))
        if uneven:
            _WARNED.add((name, ngpu, world_size))
            repeats = padding_rows(sizes, world_size)
            if evaluation:
                cost = f"; batches smaller than the ranks are merged and up to {world_size - 1} padding rows " \
                       f"are added (batch.is_padding)"
            else:
                cost = f"; {repeats} utterances are loaded twice (a rank whose share of a batch is empty " \
                       f"repeats its last utterance)" if repeats else ""
            warnings.warn(f"{name}: ngpu={ngpu} but the world size is {world_size}: batches are made divisible "
                          f"by {ngpu}, not by the {world_size} ranks, so {uneven} of {len(sizes)} batches split "
                          f"unevenly (ranks get batches of different sizes){cost}; set ngpu to {world_size} "
                          f"(--ngpu {world_size})", stacklevel=5)
    return distribute(view, ngpu, rank, world_size, descending, evaluation)
