"""Start the ranks of a distributed ``python -m speechiter.run`` job as torchrun would, forked from one process.

    python -m tests.forked_ranks WORLD_SIZE [speechiter.run arguments ...]

Each rank gets the environment torchrun gives it (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) and runs
``speechiter.run`` in a process of its own, in a session of its own (as
torchrun starts them). This process imports torch once and forks the ranks
after it, so a job costs one import of torch instead of torchrun's own and one
per rank (about 2 s each on the 2-core CI machines). It exits with the first
failing rank's code, after every rank has ended.

Only for tests whose point is what the ranks do (the kill-and-resize matrix of
tests/cli/test_elastic_resume.py); the tests of torchrun itself start torchrun.
"""
import os
import socket
import sys

import torch.distributed  # noqa: F401 (imported once, before the ranks are forked)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_rank(rank: int, world_size: int, port: int, argv: list) -> int:
    os.setsid()
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from speechiter.run import main
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code or 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    world_size, args = int(argv[0]), argv[1:]
    port = free_port()
    pids = []
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:
            os._exit(run_rank(rank, world_size, port, args))
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
