"""This process's rank and the world size, from the options or torch.distributed."""
from typing import Optional, Tuple

from speechiter.errors import ConfigError


def resolve_rank(distributed: bool, rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    """``(rank, world_size)``: the given ones if either is set, else
    torch.distributed's when ``distributed``, else ``(0, 1)``."""
    if rank is not None or world_size is not None:
        rank, world_size = int(rank or 0), int(world_size or 1)
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
