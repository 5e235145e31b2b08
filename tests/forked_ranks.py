"""Start the ranks of a distributed job as torchrun would, each forked from one process that imported torch.

    python -m tests.forked_ranks WORLD_SIZE -m speechiter.run [arguments ...]
    python -m tests.forked_ranks WORLD_SIZE script.py [arguments ...]

Each rank gets the environment torchrun gives it (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), runs the module or
script as ``__main__`` (as ``python -m module`` or ``python script.py`` would) in
a process of its own, in a session of its own (as torchrun starts them), and
dies with this process (unlike torchrun's: the orphaned-rank tests start
torchrun), so a test that times out and kills it leaves no rank. This
process imports torch once and forks the ranks after it, so a job costs one
import of torch instead of torchrun's own and one per rank (about 2 s each on
the 2-core CI machines). It exits with the first failing rank's code once
every rank has ended. With ``--stderr PREFIX`` (before WORLD_SIZE), rank r
writes its standard error to PREFIX.r instead of this process's.

Only for tests whose point is what the ranks do (the kill-and-resize matrix,
distributed evaluation, the ranks' shared plan); the tests of the command line
under torchrun start torchrun.
"""
import atexit
import os
import runpy
import socket
import sys
import traceback

import torch.distributed  # noqa: F401 (imported once, before the ranks are forked)

from speechiter.messages import say
from speechiter.sequence.lifeline import die_with_parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_rank(rank: int, world_size: int, port: int, target: list, launcher: int, stderr_prefix=None) -> int:
    """Run ``target`` (``["-m", module, *args]`` or ``[script, *args]``) as this rank, dying with ``launcher``
    (its pid); the rank's exit code."""
    os.setsid()
    if not die_with_parent(launcher):
        return 1
    if stderr_prefix:
        with open(f"{stderr_prefix}.{rank}", "w") as log:
            os.dup2(log.fileno(), 2)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    code = 0
    try:
        if target[0] == "-m":
            sys.argv = [target[1], *target[2:]]
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(target)
            sys.path.insert(0, os.path.dirname(os.path.abspath(target[0])))
            runpy.run_path(target[0], run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            say(str(stop.code))  # one write: the ranks may share this stderr
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # what the interpreter's exit runs (pools, shared memory), before os._exit
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stderr_prefix = None
    if argv[0] == "--stderr":
        stderr_prefix, argv = argv[1], argv[2:]
    world_size, target = int(argv[0]), argv[1:]
    port = free_port()
    pids = []
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:
            os._exit(run_rank(rank, world_size, port, target, os.getppid(), stderr_prefix))
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
