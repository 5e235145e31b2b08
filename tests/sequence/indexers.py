"""Module-level indexers and factories for the engine tests (picklable, so 'spawn' works)."""
import os
import signal
import threading
import time

import numpy as np

import speechiter
from speechiter.errors import DataError


class Echo:
    """MDNC's TestSequenceWorker."""

    def __getitem__(self, ids):
        return ids


class Stamped:
    """A batch of ``ids[0]`` MiB filled with the batch's position: what it holds tells which batch it is.
    (Here, not in test_zero_copy.py: a worker that unpickles it would import that module, and torch with it.)"""

    def __getitem__(self, ids):
        mib, stamp = ids
        return {"x": np.full(mib * (1 << 18), stamp, dtype=np.float32), "stamp": stamp}


class Slow:
    """Deterministic payload; takes a deterministic, varying time so workers finish out of order."""

    def __getitem__(self, ids):
        first = int(ids[0])
        time.sleep((first * 7919 % 5) * 0.003)
        return {"ids": [f"utt{i}" for i in ids],
                "x": np.arange(len(ids) * 3, dtype=np.float32).reshape(len(ids), 3) + first,
                "n": np.asarray(ids, dtype=np.int64)}


class Mixed:
    """Several dtypes and shapes, strings, nested dicts, tuples, tensors, scalars."""

    def __getitem__(self, ids):
        import torch
        first = int(ids[0])
        gen = np.random.default_rng(first)
        return {
            "feat": gen.standard_normal((len(ids), 5 + first % 3, 2)).astype(np.float32),
            "wave": gen.integers(-2**15, 2**15, (len(ids), 7), dtype=np.int16),
            "f64": np.linspace(0, 1, 11)[::2],  # not contiguous
            "mask": np.arange(6).reshape(2, 3) % 2 == 0,
            "u8": np.arange(4, dtype=np.uint8),
            "big_endian": np.arange(3, dtype=">i4"),
            "empty": np.zeros((0, 4), dtype=np.float32),
            "scalar0d": np.array(3.5),
            "text": np.array(["a", "bcd"]),
            "objects": np.array(["x", None], dtype=object),
            "tensor": torch.arange(4, dtype=torch.float32) + first,
            "bf16": torch.ones(3, dtype=torch.bfloat16),
            "nested": {"ids": [str(i) for i in ids], "pair": (np.int32(first), np.ones(2)),
                       "deep": [{"k": np.full(3, first, dtype=np.int32)}, None, 1.5, "s"]},
            "lengths": [len(ids), first],
        }


class Sized:
    """Batches of ``ids[0]`` MiB of float32, to grow slots."""

    def __getitem__(self, ids):
        mib = int(ids[0])
        return {"x": np.full(mib * (1 << 18), mib, dtype=np.float32), "mib": mib}


class Pid:
    def __getitem__(self, ids):
        return {"pid": os.getpid(), "ids": list(ids), "x": np.asarray(ids)}


class Random:
    """Draws from speechiter.rng() (thread safe) and from numpy's global generator."""

    def __getitem__(self, ids):
        return {"rng": speechiter.rng().standard_normal(4), "np": np.random.rand(3), "ids": list(ids)}


class RngOnly:
    def __getitem__(self, ids):
        time.sleep(0.001 * (int(ids[0]) % 3))
        return speechiter.rng().standard_normal(4)


class Failing:
    """Raises at id 13: a ValueError, or a DataError (exit code 2)."""

    def __init__(self, data_error=False):
        self.data_error = data_error

    def __getitem__(self, ids):
        if 13 in list(ids):
            if self.data_error:
                raise DataError(f"utterance {ids[0]}: broken wav header")
            raise ValueError("cannot decode utterance 13")
        return np.asarray(ids)


def failing_data_error():
    return Failing(data_error=True)


class BrokenFactory:
    def __init__(self):
        raise OSError("cannot open data.h5")


class Killed:
    """SIGKILLs its own process at id 17."""

    def __getitem__(self, ids):
        if 17 in list(ids):
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.005)
        return np.asarray(ids)


class Hang:
    """Hangs (a long sleep) at id 5."""

    def __init__(self, seconds=60.0):
        self.seconds = seconds

    def __getitem__(self, ids):
        if 5 in list(ids):
            time.sleep(self.seconds)
        return np.asarray(ids)


class Unpicklable:
    """Returns something that cannot cross a process boundary."""

    def __getitem__(self, ids):
        return {"x": np.asarray(ids), "fn": lambda: None}


class Stuck:
    """Appends its pid to ``marker`` and then blocks for good at id 5: in time.sleep, or in a
    read(2) of a pipe nobody writes to (a C call)."""

    def __init__(self, marker, how="sleep"):
        self.marker = marker
        self.how = how

    def __getitem__(self, ids):
        if 5 in list(ids):
            with open(self.marker, "a") as file:
                file.write(f"{os.getpid()}\n")
            if self.how == "sleep":
                time.sleep(600)
            else:
                read_end, _ = os.pipe()
                os.read(read_end, 1)
        return np.asarray(ids)


# A lock that a thread of the test process holds while workers start (test_start.py).
HELD = threading.Lock()


class Locked:
    """Takes ``HELD`` for each batch, as soundfile takes its error lock."""

    def __getitem__(self, ids):
        with HELD:
            return np.asarray(ids)


class Environ:
    """The value of $SPEECHITER_TEST_VALUE in the worker."""

    def __getitem__(self, ids):
        return os.environ.get("SPEECHITER_TEST_VALUE", "")


class LazyTorch:
    """Imports torch only when it builds a batch, then draws from torch's global generator."""

    def __getitem__(self, ids):
        import torch
        return torch.rand(len(ids)).numpy()


class ThreadCounts:
    """The building thread's library thread counts, with torch imported lazily by the first batch."""

    def __init__(self):
        import sys
        self.had_torch = "torch" in sys.modules  # when the worker built its indexer

    def __getitem__(self, ids):
        import torch
        from speechiter.sequence.threads import thread_counts
        torch.ones(4).sum()  # a first torch call in this thread
        return {"pid": os.getpid(), "had_torch": self.had_torch, "omp_env": os.environ.get("OMP_NUM_THREADS"),
                **thread_counts()}


class TorchDraw:
    """Draws from torch's global generator (not reproducible with thread workers)."""

    def __getitem__(self, ids):
        import torch
        return torch.rand(len(ids)).numpy()


LOG = []  # Logged's events, in the order they happened (thread workers share it)
PAIR = threading.Barrier(2, timeout=20)


class Logged:
    """Logs ("start", id) and ("end", id); batch 0 takes a while; batches 1 and 2 wait for each other."""

    def __getitem__(self, ids):
        LOG.append(("start", ids[0]))
        if ids[0] == 0:
            time.sleep(0.2)  # the workload of a slow first batch: others would start meanwhile
        elif ids[0] in (1, 2):
            PAIR.wait()  # both in flight at once, or the barrier breaks
        LOG.append(("end", ids[0]))
        return ids


class StalledStore:
    """Reads each id through the batch read pool, as URL values are; a read of an id >= 8 never returns
    (a stalled store: the pipe it reads is never written). ``marker``: a file that gets a line per stuck read."""

    def __init__(self, marker):
        self.marker = marker
        self._read_end, self._write_end = os.pipe()  # the write end stays open: reads block

    def __getitem__(self, ids):
        from speechiter.dataset.prefetch import reading_together, take
        column = {i: f"http://stalled.invalid/{i}" for i in ids}
        with reading_together(column, list(ids), self._read):
            return np.asarray([take(column[i], self._read) for i in ids])

    def _read(self, value):
        if int(value.rsplit("/", 1)[1]) >= 8:
            with open(self.marker, "a") as file:
                file.write("stuck\n")
            os.read(self._read_end, 1)
        return len(value)


class Sigbus:
    """Dies of SIGBUS at id 3, as a worker writing to a full /dev/shm does."""

    def __getitem__(self, ids):
        if 3 in list(ids):
            os.kill(os.getpid(), signal.SIGBUS)
        return np.asarray(ids)


class FileHog:
    """Opens files until the process has no descriptor left."""

    def __getitem__(self, ids):
        self.files = [open(os.devnull) for _ in range(1 << 20)]
        return np.asarray(ids)


class Stalled:
    """Batch ``[position, ...]`` seeded by its position; the ``stall``-th build of position ``at`` (1: the
    task's own attempt, 2: its copy; counted across workers with files in ``folder``) waits until the file
    ``folder/release`` exists (at most ``most_s`` s), the others take ``build_s`` (``slow_s`` for the other
    build of ``at``)."""

    def __init__(self, folder, at, stall=1, build_s=0.01, slow_s=None, most_s=60.0):
        self.folder, self.at, self.stall = str(folder), at, stall
        self.build_s, self.slow_s, self.most_s = build_s, slow_s, most_s

    def __getitem__(self, ids):
        pause = self.build_s
        if ids[0] == self.at:
            build = 1
            while True:
                try:
                    os.close(os.open(os.path.join(self.folder, f"build{build}"), os.O_CREAT | os.O_EXCL))
                    break
                except FileExistsError:
                    build += 1
            if build == self.stall:
                deadline = time.monotonic() + self.most_s
                while not os.path.exists(os.path.join(self.folder, "release")) and time.monotonic() < deadline:
                    time.sleep(0.01)
            elif self.slow_s is not None:
                pause = self.slow_s
        time.sleep(pause)
        return {"x": np.random.default_rng(int(ids[0])).standard_normal((len(ids), 64)).astype(np.float32),
                "ids": [int(i) for i in ids]}


class SchedulingPolicy:
    """The building thread's scheduling policy, and that of a thread it starts."""

    def __getitem__(self, ids):
        import threading
        seen = []
        started = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
        started.start()
        started.join()
        return {"pid": os.getpid(), "builder": os.sched_getscheduler(0), "started": seen[0]}
