"""How the command line was started: one process, or one rank of a torchrun job (``--distributed``).

# NOTE [ torchrun without --distributed ]
torchrun sets RANK and WORLD_SIZE in every process it starts. A run without
``--distributed`` would ignore them: each of the processes would load every
batch of the epoch and write the same --dump_batches, --report and
--save_state files over each other, with nothing to say so. So a process with
WORLD_SIZE above 1 and no ``--distributed`` is refused before it loads or
writes anything, saying the two ways out.

# NOTE [ Orphaned ranks ]
torchrun starts each rank in a session of its own, so a SIGKILL to torchrun
(``kill -9``, an out-of-memory kill) leaves the ranks running: they would go
on writing their state files while a resumed job reads and writes the same
files. Each rank notes its parent (torchrun) when it starts and, at every
step, stops with one error line once it has been reparented. A rank that does
not reach its next step (blocked in a collective with a peer that stopped,
or in a read) is ended by a watch thread: ``ORPHAN_GRACE_S`` after it sees
the rank reparented, it writes the same line and ends the process (exit 1);
the rank's loading workers end with it (NOTE [ Parent death ] in
speechiter/sequence/lifeline.py).
"""
import os
import threading
from typing import Tuple

from speechiter.errors import ConfigError, SpeechiterError
from speechiter.messages import say


def check_launch(distributed: bool) -> None:
    """Raise a ConfigError for a torchrun process without ``--distributed`` (NOTE [ torchrun without
    --distributed ])."""
    world_size = os.environ.get("WORLD_SIZE", "")
    if distributed or "RANK" not in os.environ or world_size.strip() in ("", "1"):
        return
    raise ConfigError("torchrun", f"RANK={os.environ['RANK']} and WORLD_SIZE={world_size} are set, but --distributed "
                                  f"is not given: each of the {world_size} processes would load every batch and "
                                  f"write the same --dump_batches, --report and --save_state files; add --distributed, "
                                  f"or unset RANK and WORLD_SIZE to run one process alone")


def init_distributed(out_type: str) -> Tuple[int, int]:
    """``(rank, world_size)`` of this torchrun process, with torch.distributed initialised (gloo on CPU, nccl
    for ``out_type`` cuda)."""
    import torch
    import torch.distributed as dist
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ConfigError("--distributed", "needs torchrun (RANK and WORLD_SIZE are not set)")
    if not dist.is_initialized():
        backend = "nccl" if out_type.startswith("cuda") and torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size()


#: how often the watch thread looks at the rank's parent
WATCH_S = 0.5
#: how long after that the watch ends a rank that has not stopped at a step
ORPHAN_GRACE_S = 5.0


class Launcher:
    """This rank's launcher (its parent process): :meth:`check` raises once it is gone, and a watch thread
    ends the rank if it does not get to a check (NOTE [ Orphaned ranks ]). :meth:`close` stops the watch."""

    def __init__(self, rank: int):
        self.rank = rank
        self.pid = os.getppid()
        self._closed = threading.Event()
        threading.Thread(target=self._watch, name="speechiter-launcher-watch", daemon=True).start()

    def gone(self) -> str:
        return (f"rank {self.rank}: its launcher (torchrun, pid {self.pid}) is gone (killed?), so this rank stops "
                f"too, before it writes over the files a resumed job uses")

    def check(self) -> None:
        if os.getppid() != self.pid:
            raise SpeechiterError(self.gone())

    def close(self) -> None:
        self._closed.set()

    def _watch(self) -> None:
        while os.getppid() == self.pid:
            if self._closed.wait(WATCH_S):
                return
        if not self._closed.wait(ORPHAN_GRACE_S):  # the rank did not stop at a step: it is blocked
            say(f"speechiter: error: {self.gone()} (blocked {ORPHAN_GRACE_S:g} s past it)")
            os._exit(1)
