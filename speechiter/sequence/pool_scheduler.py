"""The pool scheduler: worker processes or threads, the i-th batch out is the i-th task in.

It runs over a process or thread pool (pools.py); choice.py picks it, or the
inline one (scheduler.py) for 0 workers.

NOTE [ Ordering ]
Every dispatched task gets a global sequence number ``seq`` (never reset while
the scheduler lives, so a late result of an old epoch cannot be mistaken for a
new one). Tasks go to the least-loaded worker's own queue; results come back
in any order and wait in ``_pending`` (the reorder buffer, keyed by seq) until
the consumer reaches them. ``buffer`` bounds the batches in flight, i.e.
dispatched but not yet consumed or discarded; in process mode each of them
holds one shared-memory slot (batches the consumer still holds may hold more,
see NOTE [ Zero-copy batches ] in shm/slots.py). Which worker builds a batch never
changes the batch: its randomness comes only from Task.seed, see fetch.py.

NOTE [ Lookahead ]
``iterate(tasks, lookahead)``: once every task of ``tasks`` is dispatched,
free buffer places go to ``lookahead`` (the tasks that come next: the next
epoch's first ones, and the epoch after's when an epoch is shorter than the
buffer), so the workers do not idle at the epoch boundary. The next
``iterate()`` call keeps the prefetched results for its leading tasks that equal
them (position, ids, seed), then, once all its tasks are matched, those that
equal its own lookahead's first tasks; it discards the rest: a discarded task's
result is dropped, and its slot released, when it arrives. A call made while
the previous generator is not exhausted supersedes it the same way.

NOTE [ Slow start ]
A new scheduler sends one task; each result opens one more place, up to
``buffer`` (TCP's slow start). So the first batch, which a starting or resumed
run waits for, does not share the CPU and a store's connection with the whole
buffer. Only when tasks are sent changes, never what they give.

NOTE [ Never wait forever ]
The consumer never blocks without a timeout: it polls for results at most
``POLL_S`` (workers.py) at a time, checking the workers' liveness each round (process
sentinels wake the wait at once when a worker dies), and gives up waiting for
one batch after ``timeout`` seconds. Worker exceptions come back as Failed
messages and are raised, as WorkerError, when the consumer reaches that batch.
"""
import time
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Optional, Sequence

from speechiter import interrupts
from speechiter.errors import ResourceError, WorkerError
from speechiter.sequence import shm
from speechiter.sequence.convert import Converter, ConverterThreads, device_of, hand_over, wait_converted
from speechiter.sequence.fetch import Task, describe_ids
from speechiter.sequence.hedge import Hedger
from speechiter.sequence.limits import sigbus_hint
from speechiter.sequence.pending import Pending, leading_matches
from speechiter.sequence.pools import WorkerPool
from speechiter.sequence.promises import Promises
from speechiter.sequence.scheduler import Run, Scheduler, as_sequence
from speechiter.sequence.workers import POLL_S, Done, Failed, Fetch, Upcoming


class PoolScheduler(Scheduler):
    """Workers (processes or threads), per-worker queues and a reorder buffer.

    See NOTE [ Ordering ], NOTE [ Lookahead ], NOTE [ Never wait forever ], NOTE [ Hedging ] in hedge.py.
    """

    def __init__(self, pool: WorkerPool, slots: Optional[shm.SlotTable], out_type: str, num_converters: int,
                 buffer: int, timeout: float, hedge: bool = True):
        super().__init__()
        self._pool = pool
        self.hedger = Hedger(len(pool), hedge)  # See NOTE [ Hedging ] in hedge.py
        self._slots = slots  # SlotTable in process mode, None with threads
        self._buffer = buffer
        self._timeout = timeout
        self._share = out_type in ("null", "cpu")  # see NOTE [ Zero-copy batches ] in shm/slots.py
        self._pending = {}  # seq -> Pending: the reorder buffer and in-flight tasks
        self._load = [0] * len(pool)  # tasks sent to each worker and not answered
        self._next_seq = 0
        self._window = 1  # places in the buffer, up to buffer: see NOTE [ Slow start ]
        self._turn = 0
        self._promises = Promises()  # the tasks after the buffer, and their workers
        self._converters = ConverterThreads(out_type, num_converters) if num_converters else None
        self._convert = Converter(out_type) if self._converters is None else None  # in the consumer thread
        self._device = device_of(out_type)

    # ------------------------------------------------------------ dispatch

    def iterate(self, tasks: Sequence[Task], lookahead: Sequence[Task] = ()):
        self._check_open()
        tasks, lookahead = as_sequence(tasks), as_sequence(lookahead)
        prefetched = []
        previous = self._run
        if previous is not None:
            for p in previous.entries[previous.consumed:]:
                self._discard(p)
            prefetched = previous.ahead
        reused = leading_matches(prefetched, tasks)
        entries, prefetched = prefetched[:reused], prefetched[reused:]
        ahead = leading_matches(prefetched, lookahead) if reused == len(tasks) else 0
        for p in prefetched[ahead:]:
            self._discard(p)
        self.prefetched = reused
        self._run = Run(tasks, lookahead, entries, prefetched[:ahead])
        self._dispatch()
        return self._generate(self._run)

    def _dispatch(self):
        """Fill the buffer: the run's tasks first, then its lookahead.

        See NOTE [ Ordering ], NOTE [ Lookahead ] and NOTE [ Slow start ].
        """
        run = self._run
        while len(self._pending) < self._window:
            if len(run.entries) < len(run.tasks):
                run.entries.append(self._send(run.tasks[len(run.entries)]))
            elif len(run.ahead) < len(run.lookahead):
                run.ahead.append(self._send(run.lookahead[len(run.ahead)]))
            else:
                break
        self._promise(run)
        self.hedger.hedge(self._pending, self._load, self._attempt)  # See NOTE [ Hedging ] in hedge.py

    def _promise(self, run: Run):
        """Promise the tasks after the buffer to workers. See NOTE [ Promised tasks ] in promises.py."""
        for wid, task in self._promises.renew(run, self._load, self._turn):
            self._pool.send(wid, Upcoming(task))

    def _send(self, task: Task) -> Pending:
        wid = self._promises.worker_for(task, self.hedger.weighted(self._load), self._turn)
        self._turn = (wid + 1) % len(self._load)
        p = self._attempt(task, wid)
        self._pending[p.seq] = p
        return p

    def _attempt(self, task: Task, wid: int) -> Pending:
        """Send ``task`` to worker ``wid`` under a new seq (and, with processes, a slot)."""
        p = Pending(self._next_seq, task, wid, None)
        self._next_seq += 1
        if self._slots is None:
            msg = Fetch(p.seq, task)
        else:
            p.slot = self._slots.acquire()
            msg = Fetch(p.seq, task, self._slots.ref(p.slot))
        self._load[wid] += 1
        self.hedger.sent(wid, p.seq)
        self._pool.send(wid, msg)
        return p

    def _release(self, p: Pending):
        del self._pending[p.seq]
        p.result = None
        if p.slot is not None:
            self._slots.release(p.slot)
            p.slot = None

    def _discard(self, p: Pending):
        if p.future is not None:
            p.future.cancel()
            try:
                wait_converted(p.future, self._timeout)  # it may be reading the slot
            except Exception:  # cancelled, failed or timed out: the result is dropped anyway
                pass
            p.future = None
        if p.result is not None:
            self._release(p)
        elif p.seq in self._pending:
            p.discard = True

    # ------------------------------------------------------------- receive

    def _receive(self, timeout: float):
        """Take in what workers sent within ``timeout``; raise if one died.

        See NOTE [ Ordering ] (results wait in _pending) and NOTE [ Slot ownership ] in shm/slots.py.
        """
        messages, dead = self._pool.recv(timeout)
        for msg in messages:
            if msg.seq is None:  # the worker could not build its indexer
                raise WorkerError(self._failure_text(msg, None), msg.exit_code) from None
            extra = self.hedger.extra.pop(msg.seq, None)  # a copy, or an attempt a copy beat
            p = self._pending[msg.seq] if extra is None else extra
            self._load[p.wid] -= 1
            self.hedger.arrived(p.wid, msg.seq)
            self._window = min(self._window + 1, self._buffer)
            if isinstance(msg, Done) and self._slots is not None:
                self._slots.accept(msg.payload.slot)
            self._promises.wanted |= isinstance(msg, Done) and msg.read_ahead  # NOTE [ Promised tasks ]
            if extra is not None:
                dropped = self.hedger.settle(extra, isinstance(msg, Done), self._pending, msg)
                if dropped is not None and dropped.slot is not None:
                    self._slots.release(dropped.slot)
            elif p.discard:
                self._release(p)
            else:
                p.result = msg
        for wid, how in dead:
            busy = sorted(seq for seq, p in self._pending.items() if p.wid == wid and p.result is None
                          and not p.discard)
            doing = f"while building batch {self._pending[busy[0]].task.position}" if busy else "while idle"
            message = f"loading worker {wid} (pid {self._pool.pid(wid)}) exited unexpectedly ({how}) {doing}"
            if how.endswith("SIGBUS") and self._slots is not None:  # NOTE [ Machine limits ] in limits.py
                raise ResourceError(message + sigbus_hint())
            raise RuntimeError(message)

    def _wait(self, run: Run, i: int) -> Pending:
        """Block until task ``i`` of ``run`` has its result. See NOTE [ Never wait forever ].

        The task may not even be dispatched yet while discarded tasks still
        hold the buffer; their arrivals free places.
        """
        deadline = time.monotonic() + self._timeout
        while True:
            self._dispatch()
            p = run.entries[i] if i < len(run.entries) else None
            if p is not None and p.result is not None:
                return p
            interrupts.check()  # NOTE [ One shutdown path ] in speechiter/interrupts.py
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if p is None:
                    raise TimeoutError(f"no place in the buffer for batch {run.tasks[i].position} after waiting "
                                       f"{self._timeout:g} s (timeout={self._timeout:g})")
                raise TimeoutError(
                    f"no batch after waiting {self._timeout:g} s (timeout={self._timeout:g}) for batch "
                    f"{p.task.position} from loading worker {p.wid} (pid {self._pool.pid(p.wid)}), "
                    f"ids {describe_ids(p.task.ids)}")
            self._receive(min(remaining, POLL_S, self.hedger.wait_s(self._load)))

    def _failure_text(self, msg: Failed, task: Optional[Task]) -> str:
        where = (f"while building batch {task.position} (ids {describe_ids(task.ids)})" if task is not None
                 else "while building its indexer (calling the worker factory)")
        return (f"loading worker {msg.wid} (pid {self._pool.pid(msg.wid)}) raised {msg.kind}: {msg.message}\n"
                f"  {where}\n\nTraceback in the worker:\n{msg.traceback.rstrip()}")

    # ------------------------------------------------------------- convert

    def _resolver(self, p: Pending):
        """A reader of p's slot, mapped here, in the consumer thread (converter threads only make views).

        A shared reader owns the slot from now on. See NOTE [ Zero-copy batches ] in shm/slots.py.
        """
        if self._slots is None:
            return None
        payload = p.result.payload
        reader = self._slots.reader(payload, self._share and payload.nbytes >= shm.SHARE_MIN_BYTES)
        if reader.shared:
            p.slot = None
        return reader

    def _submit(self, p: Pending):
        if isinstance(p.result, Done) and p.future is None:
            payload = p.result.payload
            resolver = self._resolver(p)
            p.future = self._converters.submit(payload, resolver)

    def _take(self, run: Run, i: int):
        p = self._wait(run, i)
        if isinstance(p.result, Failed):
            raise WorkerError(self._failure_text(p.result, p.task), p.result.exit_code) from None
        if self._converters is None:
            batch, event = self._convert(p.result.payload, self._resolver(p))
        else:
            self._submit(p)
            self._receive(0)
            for q in run.entries[i + 1:i + 1 + self._converters.count]:
                self._submit(q)  # convert ahead while the consumer computes
            try:
                batch, event = wait_converted(p.future, self._timeout)
            except FutureTimeout:
                raise TimeoutError(f"converting batch {p.task.position} took more than "
                                   f"{self._timeout:g} s (timeout={self._timeout:g})") from None
            p.future = None
        self._release(p)
        self._dispatch()
        return hand_over(batch, event, self._device)

    # --------------------------------------------------------------- close

    def close(self):
        """End converters, then workers, then shared memory. Idempotent.

        See NOTE [ Shutdown order ] in scheduler.py.
        """
        if self.closed:
            return
        self.closed = True
        try:
            if self._converters is not None:
                self._converters.close()
        finally:
            try:
                self._pool.close()
            finally:
                self._pending.clear()
                self.hedger.extra.clear()
                if self._slots is not None:
                    self._slots.close()

