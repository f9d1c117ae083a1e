"""Executing a sweep: every grid point (:mod:`graphnorm.sweep.grid`) that has no result yet, run serially, in local
processes, or on SLURM through submitit (:func:`run_sweep`), and resumable.

Every grid point is one call of a plain function ``run(config: RunConfig) -> dict`` (:func:`resolve_run_fn`). The
run itself writes ``results/<run_id>.json`` atomically when it ends, ok or failed (:func:`execute_run`), so that file
is the only source of truth: the tables and ``summary.md`` (:mod:`graphnorm.sweep.tables`) are regenerated from those
files, and re-running a sweep executes only the grid points without one. ``run_id`` is a stable hash of the run's
full config (:func:`graphnorm.config.config_run_id`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import json
import multiprocessing
import os
import pickle
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from tqdm import tqdm

from graphnorm.config import RunConfig, config_run_id
from graphnorm.files import (
    atomic_write_text,
    check_output_dir,
    check_output_path,
    ensure_writable_dir,
    hold_lock,
    open_for_append,
    remove_leftover_temporary_files,
)
from graphnorm.sweep.cpu_budget import CpuPlan, env_threads, passive_openmp_wait, plan_cpus, run_processes
from graphnorm.sweep.grid import expand_grid, grid_keys
from graphnorm.sweep.processes import init_worker, signals_interrupt, stop_workers
from graphnorm.sweep.results import check_history, check_layers, load_results
from graphnorm.sweep.slurm import (  # noqa: F401 (make_submitit_executor, SlurmOptions: importable from here too)
    JobHooks,
    SlurmOptions,
    make_submitit_executor,
    run_submitit,
)
from graphnorm.sweep.tables import (
    DEFAULT_METRICS,
    atomic_write_csv,
    check_metric,
    csv_cell,
    epochs_table,
    layers_table,
    runs_table,
    steps_table,
    write_summary,
)
from graphnorm.train.progress import SweepProgress
from graphnorm.train.record import STEPS_KEY

RunFn = Callable[[RunConfig], dict[str, Any]]

EXECUTORS = ("local", "serial", "submitit-local", "slurm")
CSV_REFRESH_S = 2.0  # regenerate the CSVs at most this often while runs finish (always at the end)
# What a sweep writes at the top of its folder, besides results/, logs/ and report/ (and its lock, .sweep.lock).
SWEEP_FILES = ("sweep.yaml", "runs.csv", "layers.csv", "epochs.csv", "steps.csv", "summary.md")


# ----------------------------------------------------------------------------------------------------------------
# One run (executed in a worker process, a SLURM job, or in-process)


def _set_threads(threads: int | None) -> None:
    """Set torch's intra-op threads of this process (``None``: leave them)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def execute_run(run_fn: RunFn, config_values: dict[str, Any], out_dir: str, threads: int | None = None) -> dict:
    """Run one config and write ``results/<run_id>.json`` atomically; return ``{"run_id", "status"}``.

    A failing run is recorded with its error and traceback instead of raising, so the sweep goes on.
    ``KeyboardInterrupt`` is not caught: an interrupted run leaves no result and is re-run on resume.
    """
    from graphnorm.train.collapse_steps import check_step_rows  # here: it imports graphnorm.analysis, which is slow

    _set_threads(threads)
    config = RunConfig.from_dict(config_values)
    run_id = config_run_id(config)
    out = Path(out_dir)
    logs = check_output_dir(out / "logs", "the sweep's logs folder", links=False)
    result: dict[str, Any] = {"run_id": run_id, "config": config.to_dict(), "host": socket.gethostname()}
    result["pid"] = os.getpid()
    start = time.perf_counter()
    # A run's own output (stdout and stderr: its progress lines, warnings) goes to its log file, flushed line by line
    # (tail -f shows a live run): parallel runs would otherwise interleave on one terminal, and the log is no
    # terminal, so the run draws no epoch bar. Appended: a run executed again (after an interrupt, or
    # --retry-failed) keeps the log of its earlier attempts.
    with (
        open_for_append(logs / f"{run_id}.log", "the run's log", buffering=1) as log,
        contextlib.redirect_stdout(log),
        contextlib.redirect_stderr(log),
    ):
        print(f"==== attempt started {time.strftime('%Y-%m-%dT%H:%M:%S')} on {result['host']} (pid {os.getpid()}) ====")
        try:
            record = run_fn(config)
            if not isinstance(record, dict):
                raise TypeError(f"run function returned {type(record).__name__}, expected a dict record")
            record = dict(record)
            layers = record.pop("layers", [])
            check_layers(layers)
            history = record.pop("history", [])
            check_history(history)
            steps = record.pop(STEPS_KEY, [])
            check_step_rows(steps)
            json.dumps([record, layers, history, steps])  # fail here, as this run's error, if not JSON-serializable
            result.update(status="ok", record=record, layers=layers, history=history, error=None, traceback=None)
            result[STEPS_KEY] = steps
        except (Exception, SystemExit) as e:  # sys.exit() in a run function is that run's failure, not the sweep's
            tb = traceback.format_exc()
            log.write(tb)
            result.update(
                status="failed", record={}, layers=[], history=[], error=f"{type(e).__name__}: {e}", traceback=tb
            )
            result[STEPS_KEY] = []
    result["elapsed_s"] = round(time.perf_counter() - start, 3)
    result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    write_result(out, result)
    return {"run_id": run_id, "status": result["status"]}


def write_result(out_dir: Path, result: dict[str, Any]) -> None:
    """``result`` to ``<out_dir>/results/<run_id>.json``, atomically (:mod:`graphnorm.sweep.results` reads it)."""
    results = check_output_dir(Path(out_dir) / "results", "the sweep's results folder", links=False)
    atomic_write_text(results / f"{result['run_id']}.json", json.dumps(result, indent=1), "the run's result")


def failed_result(config: RunConfig, error: str) -> dict[str, Any]:
    """The record of a run whose worker or job died before it could write one itself."""
    return {
        "run_id": config_run_id(config),
        "config": config.to_dict(),
        "status": "failed",
        "record": {},
        "layers": [],
        "history": [],
        STEPS_KEY: [],
        "error": error.strip().splitlines()[0],  # one line for runs.csv; the whole message stays in the json
        "traceback": error,
        "elapsed_s": None,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


# ----------------------------------------------------------------------------------------------------------------
# The sweep


def resolve_run_fn(spec: str | RunFn | None) -> RunFn:
    """``None`` -> ``graphnorm.train.run``; ``"module:function"`` -> that function; a callable as is.

    An unimportable module is a ``ValueError`` (bad input), so a typo fails before any run starts.
    """
    if spec is None:
        spec = "graphnorm.train:run"
    if callable(spec):
        return spec
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"run function {spec!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise ValueError(f"run function {spec!r}: {e}") from None
    except Exception as e:  # the module itself raises while importing (a syntax error, a missing dependency...)
        first_line = (str(e).splitlines() or [""])[0]
        raise ValueError(
            f"run function {spec!r}: importing {module_name} failed: {type(e).__name__}: {first_line}"
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"{module_name} has no function {attr!r}")
    return fn


def status_table(sweep: dict[str, Any], configs: list[RunConfig], out_dir: Path) -> pd.DataFrame:
    """The runs of the grid with their state (done, failed, missing, invalid): what ``--dry-run`` prints."""
    results = load_results(out_dir, [config_run_id(c) for c in configs])
    keys = grid_keys(sweep) or ["norm", "num_layers", "seed"]
    rows = []
    for config in configs:
        run_id = config_run_id(config)
        result = results.get(run_id)
        if result is None:  # no file, or an invalid one (named by load_results); either runs again
            state = "invalid" if (out_dir / "results" / f"{run_id}.json").exists() else "missing"
        else:
            state = "done" if result["status"] == "ok" else "failed"
        rows.append({"run_id": run_id, **{k: csv_cell(getattr(config, k)) for k in keys}, "state": state})
    return pd.DataFrame(rows, columns=["run_id", *keys, "state"])


@contextlib.contextmanager
def _sweep_lock(out_dir: Path) -> Iterator[None]:
    """Hold ``<out_dir>/.sweep.lock`` while inside (:func:`graphnorm.files.hold_lock`: a regular file, never
    truncated, never through a link); ``RuntimeError`` when another sweep holds it (two sweeps writing one directory
    would run the same grid points twice)."""
    busy = f"another sweep is running in {out_dir}; wait for it or use another --out"
    with hold_lock(out_dir / ".sweep.lock", busy, "the sweep's lock file"):
        yield


class _Tables:
    """Keeps the finished results and regenerates runs.csv/layers.csv/epochs.csv (and steps.csv, once a run has step
    rows) from them (throttled, atomic)."""

    def __init__(self, out_dir: Path, configs: list[RunConfig], results: dict[str, dict[str, Any]]):
        self.out_dir, self.configs, self.results = out_dir, configs, results
        self.last_write = 0.0

    def add(self, run_id: str) -> dict[str, Any] | None:
        """Read the result ``run_id`` just wrote (None if invalid) and rewrite the tables if the last write is old."""
        loaded = load_results(self.out_dir, [run_id])
        self.results.update(loaded)
        if time.monotonic() - self.last_write > CSV_REFRESH_S:
            self.write()
        return loaded.get(run_id)

    def reread(self, run_ids: list[str]) -> None:
        """Take up results written but not yet reported (the driver was interrupted in between)."""
        self.results.update(load_results(self.out_dir, run_ids))

    def write(self) -> pd.DataFrame:
        """Rewrite every table now; returns the runs table."""
        runs = runs_table(self.configs, self.results)
        atomic_write_csv(self.out_dir / "runs.csv", runs)
        atomic_write_csv(self.out_dir / "layers.csv", layers_table(self.configs, self.results))
        atomic_write_csv(self.out_dir / "epochs.csv", epochs_table(self.configs, self.results))
        steps = steps_table(self.configs, self.results)
        if not steps.empty or (self.out_dir / "steps.csv").exists():
            atomic_write_csv(self.out_dir / "steps.csv", steps)
        self.last_write = time.monotonic()
        return runs


def run_sweep(
    sweep: dict[str, Any],
    out_dir: str | os.PathLike | None = None,
    run_fn: RunFn | str | None = None,
    executor: str = "local",
    workers: int | None = None,
    threads: int | None = None,
    retry_failed: bool = False,
    slurm: SlurmOptions | None = None,
    make_plots: bool = True,
    progress: bool | None = None,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Execute the grid points of ``sweep`` that have no result yet in ``out_dir``; return the runs table.

    ``executor``: ``"local"`` (a process pool of ``workers``, default: all cores), ``"serial"`` (in-process),
    ``"submitit-local"`` (submitit's LocalExecutor, the SLURM code path on this machine, ``workers`` jobs at a
    time) or ``"slurm"``. ``workers`` default to the usable cores (:func:`graphnorm.sweep.cpu_budget.usable_cores`:
    affinity, container quota, ``$SLURM_CPUS_PER_TASK``). ``threads``: torch threads per run, else
    ``$GRAPHNORM_THREADS``, else for local runs usable cores / workers, or 1 on a busy machine
    (:func:`graphnorm.sweep.cpu_budget.plan_cpus`); on SLURM the job's CPUs; serial runs keep the
    process's setting unless one of those is given.
    ``progress=None``: a progress bar only on a terminal.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; valid: {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    # The run function's module first: importing it registers the models and datasets it defines.
    run_fn = resolve_run_fn(run_fn if run_fn is not None else sweep.get("run_fn"))
    configs = expand_grid(sweep, log)  # every run is validated before anything starts
    check_runs_outputs(configs)  # and every run's checkpoint and TensorBoard folders
    if executor == "local":
        try:
            pickle.dumps(run_fn)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise ValueError(f"run function cannot be sent to worker processes ({e}); use executor 'serial'") from None
    out = Path(out_dir) if out_dir is not None else Path("runs") / sweep["name"]
    ensure_writable_dir(out, f"--out {out}")
    with _sweep_lock(out), signals_interrupt():  # SIGTERM/SIGHUP: the same cleanup as Ctrl-C
        results, todo = _prepare_out(out, sweep, configs, retry_failed, log)
        tables = _Tables(out, configs, results)
        tables.write()
        done = len(configs) - len(todo)
        log(f"sweep {sweep['name']}: {len(configs)} runs, {done} already done, {len(todo)} to run -> {out}")
        bar = SweepProgress(sweep["name"], len(todo), log, bar=progress)  # a bar on a terminal, else lines
        failures = 0

        def finished(run_id: str) -> None:
            nonlocal failures
            result = tables.add(run_id)
            if result is not None and result["status"] != "ok":
                failures += 1
                tqdm.write(f"run {run_id} failed: {result['error']}", file=sys.stderr)
            report_finished(bar, run_id, result, sweep.get("metric"))

        try:
            _execute(executor, run_fn, todo, out, workers, threads, slurm or SlurmOptions(), finished, log)
        except OSError as e:  # a result that cannot be saved: every further run would be lost too
            raise RuntimeError(
                f"cannot write the sweep's files in {out}: {e.strerror or e} ({e.filename or out}); finished runs "
                "are saved: make room (or fix the folder) and run the same command to resume"
            ) from None
        finally:
            bar.close()
            runs = _final_tables(tables, todo, log)
        if failures:
            log(f"{failures} run(s) failed; errors in runs.csv, tracebacks in {out / 'results'}")
        write_summary(sweep, runs, out, log)
    if make_plots:
        from graphnorm.sweep.report import make_report  # here: matplotlib takes a second to import

        log(f"writing the report into {out}")
        check_output_dir(out / "report", "the sweep's report folder", links=False)  # make_report writes there
        make_report(out)
    return runs


def check_runs_outputs(configs: list[RunConfig]) -> None:
    """Every run's checkpoint_dir and TensorBoard folders, checked before the first run starts
    (:func:`graphnorm.train.loop.check_run_outputs`), so that no run trains only to find that it cannot save."""
    if all(c.checkpoint_dir is None and c.tensorboard_dir is None for c in configs):
        return
    from graphnorm.train.loop import check_run_outputs  # here: it imports torch and PyG

    for config in configs:
        check_run_outputs(config)


def report_finished(bar: SweepProgress, run_id: str, result: dict[str, Any] | None, metric: str | None) -> None:
    """The progress line of a finished run: its status, the sweep's metric (default: ``test_<record's metric>``,
    else the first of :data:`DEFAULT_METRICS` it recorded) and its run time."""
    if result is None:  # its result file is unreadable (load_results warned)
        bar.finished(run_id, "unreadable", None, None, None)
        return
    record = result.get("record") or {}
    if metric is None:
        named = f"test_{record['metric']}" if isinstance(record.get("metric"), str) else None
        metric = named if named in record else next((m for m in DEFAULT_METRICS if m in record), None)
    bar.finished(run_id, result["status"], metric, record.get(metric), result.get("elapsed_s"))


def _prepare_out(
    out: Path, sweep: dict[str, Any], configs: list[RunConfig], retry_failed: bool, log: Callable[[str], None]
) -> tuple[dict[str, dict[str, Any]], list[RunConfig]]:
    """With the sweep lock held: check every file the sweep will write (before any run: a run whose result cannot be
    saved is lost), tidy ``out``, read its results, record the config; the results and runs to do."""
    for name in SWEEP_FILES:
        check_output_path(out / name, "the sweep's file")
    for name in ("results", "logs"):  # folders the sweep makes: never links out of the folder the user named
        check_output_dir(out / name, f"the sweep's {name} folder", links=False, create=False)
    for config in configs:
        run_id = config_run_id(config)
        check_output_path(out / "results" / f"{run_id}.json", "the run's result")
        check_output_path(out / "logs" / f"{run_id}.log", "the run's log")
    for folder in (out, out / "results"):  # the lock is ours: no writer of this folder is left running
        remove_leftover_temporary_files(folder)
    results = load_results(out, [config_run_id(c) for c in configs])
    check_metric(sweep.get("metric"), results)
    _note_config_change(out, sweep, log)
    atomic_write_text(out / "sweep.yaml", yaml.safe_dump(sweep, sort_keys=False))
    todo = [
        c
        for c in configs
        if config_run_id(c) not in results or (retry_failed and results[config_run_id(c)]["status"] != "ok")
    ]
    return results, todo


def _execute(
    executor: str,
    run_fn: RunFn,
    todo: list[RunConfig],
    out: Path,
    workers: int | None,
    threads: int | None,
    slurm: SlurmOptions,
    finished: Callable[[str], None],
    log: Callable[[str], None] = print,
) -> None:
    """Run ``todo`` on ``executor``, calling ``finished(run_id)`` as each run's result is written."""
    if executor == "serial":
        import torch

        threads = threads or env_threads()
        previous = torch.get_num_threads()
        try:
            for config in todo:
                finished(execute_run(run_fn, config.to_dict(), str(out), threads)["run_id"])
        finally:  # the runs ran in this process: give its caller (a notebook, a script) its threads back
            torch.set_num_threads(previous)
    elif executor == "local":
        _run_process_pool(run_fn, todo, out, workers, threads, finished, log)
    else:
        _run_submitit(run_fn, todo, out, executor, workers, threads, slurm, finished, log)


def _final_tables(tables: _Tables, todo: list[RunConfig], log: Callable[[str], None]) -> pd.DataFrame:
    """runs.csv & co. from every result on disk, at the end of a sweep (finished, interrupted or failed)."""
    tables.reread([config_run_id(c) for c in todo])
    try:
        return tables.write()
    except OSError as e:  # already failing (a full disk?): keep the error that stopped the sweep
        log(f"warning: cannot rewrite the CSVs in {tables.out_dir}: {e.strerror or e}")
        return runs_table(tables.configs, tables.results)


def _note_config_change(out: Path, sweep: dict[str, Any], log: Callable[[str], None]) -> None:
    """Say so when ``sweep`` differs from the config of the last sweep into ``out`` (edited since, or another)."""
    try:
        previous = yaml.safe_load((out / "sweep.yaml").read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return
    if not isinstance(previous, dict) or previous == sweep:
        return
    changed = sorted(str(k) for k in {*previous, *sweep} if previous.get(k) != sweep.get(k))
    log(
        f"note: the sweep config differs from the one last run in {out} ({', '.join(changed)}); the results of "
        "grid points no longer in it stay in results/ but leave runs.csv"
    )


def _run_process_pool(
    run_fn: RunFn,
    todo: list[RunConfig],
    out: Path,
    workers: int | None,
    threads: int | None,
    finished: Callable[[str], None],
    log: Callable[[str], None] = print,
) -> None:
    """Run ``todo`` in a process pool (:func:`graphnorm.sweep.cpu_budget.plan_cpus` sizes it; :func:`pool_start_method`
    says how its workers start), calling ``finished(run_id)`` as each result is written. A run that cannot start in
    its worker is recorded as failed; a worker that dies stops the sweep with ``RuntimeError`` (which run killed it
    is unknown)."""
    if not todo:
        return
    plan = plan_cpus(len(todo), workers, threads, devices={c.device for c in todo}, processes=run_processes(run_fn))
    log_cpu_plan(plan, log)
    workers, threads = plan.workers, plan.threads
    context = multiprocessing.get_context(pool_start_method(todo))
    if context.get_start_method() == "forkserver":
        module = getattr(run_fn, "__module__", None)
        context.set_forkserver_preload(
            ["graphnorm.sweep.preload", *([module] if module and module != "__main__" else [])]
        )
    with passive_openmp_wait():
        environment = dict(os.environ)  # the workers' (see init_worker)
    warm = context.get_start_method() == "spawn"  # a spawned worker loads the probe's kernels itself
    if warm:  # compiled once here, so that the workers load them from numba's cache rather than each compile them
        from graphnorm.analysis.collapse import warm_kernels

        warm_kernels()
    pool = concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context, initializer=init_worker, initargs=(os.getpid(), environment, warm)
    )
    try:
        with passive_openmp_wait():  # the forkserver starts (and reads it) at the first submit
            futures = {pool.submit(execute_run, run_fn, c.to_dict(), str(out), threads): c for c in todo}
        for future in concurrent.futures.as_completed(futures):
            config = futures[future]
            try:
                finished(future.result()["run_id"])
            except concurrent.futures.process.BrokenProcessPool:
                # Which run killed its worker (out of memory?) is unknown, so none is marked failed.
                raise RuntimeError(
                    "a worker process died (killed, or out of memory?); unfinished runs have no result: "
                    "re-run the sweep to resume, perhaps with fewer --workers"
                ) from None
            except OSError:  # the worker could not write the result (disk full, read-only): the sweep stops
                raise
            except Exception as e:  # the run could not even start in its worker: record it
                write_result(out, failed_result(config, f"{type(e).__name__}: {e}"))
                finished(config_run_id(config))
    except BaseException:
        # Interrupted (or broken): stop now rather than wait for the running runs (they leave no result and run on
        # resume), and return only once no worker is left to write a result.
        stop_workers(pool)
        raise
    pool.shutdown(wait=True)


def pool_start_method(todo: list[RunConfig]) -> str:
    """How a local sweep starts its workers. ``"forkserver"`` for CPU runs: not fork, since forking a process that
    already runs torch's thread pools can deadlock; the server imports torch, the probe's compiled kernels
    (:mod:`graphnorm.sweep.preload`) and the run function's module once, and every worker forks from it instead of
    loading them again. ``"spawn"`` as soon as one run will use CUDA (``device: cuda``, or ``auto`` where CUDA is
    available): importing torch and PyG asks the CUDA driver for its devices, and a process forked after that cannot
    use CUDA at all (``cudaErrorInitializationError`` at the first ``.to("cuda")``)."""
    devices = {config.device for config in todo}
    if "auto" in devices:
        import torch

        devices.add("cuda" if torch.cuda.is_available() else "cpu")
    return "spawn" if "cuda" in devices else "forkserver"


def log_cpu_plan(plan: CpuPlan, log: Callable[[str], None]) -> None:
    """One line: runs at once x torch threads each, and why; a warning when that exceeds the usable cores."""
    log(f"{plan.workers} worker(s) x {plan.threads} torch thread(s) on {plan.cores} usable core(s) ({plan.why})")
    if plan.oversubscribed:
        log(
            f"warning: {plan.workers} x {plan.threads} threads exceed the {plan.cores} usable cores; each op then "
            "waits for descheduled threads (often several times slower): lower --workers or --threads"
        )


def _run_submitit(
    run_fn: RunFn,
    todo: list[RunConfig],
    out: Path,
    executor_name: str,
    workers: int | None,
    threads: int | None,
    slurm: SlurmOptions,
    finished: Callable[[str], None],
    log: Callable[[str], None] = print,
) -> None:
    """``todo`` as submitit jobs (:func:`graphnorm.sweep.slurm.run_submitit`), each one :func:`execute_run`."""
    hooks = JobHooks(execute=execute_run, record_failed=_record_failed)
    run_submitit(run_fn, todo, out, executor_name, workers, threads, slurm, finished, hooks, log)


def _record_failed(out: Path, config: RunConfig, error: str) -> None:
    write_result(out, failed_result(config, error))
