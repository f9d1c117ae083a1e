"""Process control of a local sweep: its workers never outlive the driver, and an interrupt stops them all.

A local sweep's workers are forked by multiprocessing's forkserver, so their parent is the forkserver, not the
driver: nothing in the kernel ties a worker's life to the driver's. Three pieces do: :func:`signals_interrupt` (every
way of asking the driver to stop goes through the same cleanup), :func:`stop_workers` (that cleanup: the sweep's lock
is released, and ``runs.csv`` written, only when no worker can write another result) and :func:`init_worker` (each
worker leaves Ctrl-C to the driver and exits as soon as the driver is gone).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator

from graphnorm.files import pid_alive

STOP_GRACE_S = 3.0  # a worker still alive this long after SIGTERM gets SIGKILL
POLL_S = 0.5  # the watchdog's polling period where pidfds are not available


class SweepInterrupted(KeyboardInterrupt):
    """The driver was asked to stop by a signal other than SIGINT (``signum`` says which)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_interrupt(signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """While inside, each of ``signums`` left at its default raises :class:`SweepInterrupted` in the main thread,
    as SIGINT raises ``KeyboardInterrupt``: one cleanup for every way of asking the driver to stop."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise SweepInterrupted(signum)

    previous = {s: signal.getsignal(s) for s in signums}
    for signum, handler in previous.items():
        if handler == signal.SIG_DFL:  # a handler the caller installed stays theirs
            signal.signal(signum, interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def default_sigterm() -> None:
    """Give SIGTERM its default action back where this process inherited it ignored. An ignored signal survives
    ``exec``, so whatever started the process (a CI runner, a job supervisor) may have left SIGTERM ignored without
    the user knowing: ``kill PID`` would then leave a sweep running to its end, and :func:`stop_workers` would wait
    out its grace period on every worker. A handler installed in this process is left alone, and so is an ignored
    SIGHUP: ``nohup`` ignores it on purpose."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def init_worker(driver_pid: int, environment: dict[str, str] | None = None, warm: bool = False) -> None:
    """Pool initializer: ignore SIGINT (Ctrl-C on a terminal reaches the whole process group; the driver alone
    handles it), but not SIGTERM (:func:`default_sigterm`); end this worker when the driver is gone
    (:func:`_exit_with_driver`); take the driver's ``environment`` of this sweep (workers fork from a forkserver that
    keeps the environment of the first sweep in the driver process: a later sweep there, in a notebook say, would
    otherwise not pass its changes on). Variables read only when a process starts (``OMP_WAIT_POLICY``) keep the
    forkserver's values. The collapse probe's compiled kernels come loaded from the forkserver
    (:mod:`graphnorm.sweep.preload`); a spawned worker (``warm``) loads them here, before its first run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    default_sigterm()  # stop_workers ends a worker with SIGTERM
    if environment is not None:
        os.environ.clear()
        os.environ.update(environment)
    threading.Thread(target=_exit_with_driver, args=(driver_pid,), name="driver-watchdog", daemon=True).start()
    if warm:
        from graphnorm.analysis.collapse import warm_kernels

        warm_kernels()


def _exit_with_driver(driver_pid: int) -> None:
    """The worker's watchdog thread: exit the process once the driver has exited, whatever killed it (``kill -9``
    included, where no cleanup code runs). It waits on a pidfd of the driver (Linux >= 5.3): no polling, and no
    confusion with a later process given the same pid; elsewhere it polls the driver's pid every :data:`POLL_S`.
    ``PR_SET_PDEATHSIG`` would not do: it fires on the death of the worker's parent, the forkserver."""
    try:
        pidfd = os.pidfd_open(driver_pid)
    except ProcessLookupError:  # already gone
        pidfd = None
    except (AttributeError, OSError):  # no pidfd_open (not Linux, or a kernel before 5.3): poll
        while pid_alive(driver_pid):
            time.sleep(POLL_S)
        pidfd = None
    if pidfd is not None:
        select.select([pidfd], [], [])  # readable once the driver has exited
    print(f"graphnorm sweep worker {os.getpid()}: driver {driver_pid} is gone; exiting", file=sys.stderr)
    os._exit(1)  # now, from this thread, even while the main thread is inside a run


def stop_workers(pool: concurrent.futures.ProcessPoolExecutor, grace_s: float = STOP_GRACE_S) -> None:
    """Cancel the queued runs, terminate the running ones, and return only when every worker has exited."""
    # Take the workers before shutdown(): on Python < 3.14 it forgets them (pool._processes = None), and there is
    # no public way to reach them (3.14's terminate_workers() does not wait for them).
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(grace_s)
