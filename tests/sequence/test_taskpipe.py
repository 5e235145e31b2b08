"""TaskPipe: tasks reach a worker process in order, and a full or broken pipe never blocks the sender."""
import multiprocessing
import time

import pytest

from speechiter.sequence import MSequence, Task
from speechiter.sequence.taskpipe import TaskPipe
from tests.sequence import indexers

BIG = 40_000  # characters per message: two fill the 64 KiB pipe


def echo_back(reader, results, count):
    for _ in range(count):
        results.send(reader.recv())


@pytest.mark.slow  # forks
@pytest.mark.timeout(60)
def test_messages_larger_than_the_pipe_wait_in_the_sender_and_arrive_in_order():
    ctx = multiprocessing.get_context("fork")
    tasks = TaskPipe(ctx)
    messages = [(i, chr(65 + i) * BIG) for i in range(8)]
    for msg in messages:
        tasks.send(msg)  # nobody reads yet: returns at once, the rest stays unsent
    assert tasks.pending
    results, results_writer = ctx.Pipe(duplex=False)
    child = ctx.Process(target=echo_back, args=(tasks.reader, results_writer, len(messages)), daemon=True)
    child.start()
    results_writer.close()
    tasks.close_reader()
    got, deadline = [], time.monotonic() + 30
    while len(got) < len(messages) and time.monotonic() < deadline:
        tasks.flush()
        if results.poll(0.01):
            got.append(results.recv())
    child.join(10)
    tasks.close()
    assert got == messages
    assert not tasks.pending and child.exitcode == 0


def test_sending_to_a_worker_that_is_gone_neither_blocks_nor_raises():
    tasks = TaskPipe(multiprocessing.get_context("fork"))
    tasks.close_reader()  # no process holds the worker's end any more
    tasks.send(("x" * BIG,))
    tasks.send(("y",))
    assert tasks.broken and not tasks.pending
    tasks.close()


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_tasks_bigger_than_the_pipe_still_flow_through_msequence(start_method):
    # Each task carries 20,000 ids (~100 KiB pickled), more than a pipe holds.
    tasks = [Task(i, list(range(i * 20_000, (i + 1) * 20_000)), None) for i in range(12)]
    manager = MSequence(indexers.Echo, num_workers=2, thread_type="proc", start_method=start_method,
                        out_type="null", buffer=4, dset_size=0)
    with manager.start() as mng:
        got = list(mng.iterate(tasks))
    assert [list(batch) for batch in got] == [task.ids for task in tasks]
