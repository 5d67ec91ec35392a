"""``fl-async bench``'s commands: run (or resume) a suite or a sweep and report it, report a
folder again, export its records."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from fl_async.bench.export import export_suite, is_records_folder, merge_suite, read_records
from fl_async.bench.grid import DEFAULT_GRID
from fl_async.bench.report import REPORT, write_records_report, write_report
from fl_async.bench.runner import SUITE_FILE, SuiteError, SuiteSpec, planned_runs
from fl_async.bench.schedule import run_suite
from fl_async.bench.sweep import SweepGrid
from fl_async.bench.tuning import TUNED_FILE, tuned_record, write_tuned
from fl_async.files import read_json
from fl_async.validation import InvalidArgument


def run_and_report(
    spec: SuiteSpec,
    out: Path,
    actors: int,
    ray_address: str | None = None,
    *,
    jobs: int = 1,
    run_timeout: float | None = None,
    records: Path | None = None,
    engine: str = "study",
) -> int:
    """Run the suite's missing runs into ``out`` (``run_suite``, each stopped after
    ``run_timeout`` s if given), then write its report; 1 if a run failed."""
    from fl_async.data.download import DownloadError

    started = time.monotonic()
    try:
        check_dataset(spec)
        outcome = run_suite(
            spec,
            out,
            actors=actors,
            ray_address=ray_address,
            engine=engine,
            run_timeout=run_timeout,
            jobs=jobs,
            records=records,
        )
    except InvalidArgument as error:  # SuiteError, or a damaged file of the suite folder
        return error_exit(error)
    except DownloadError as error:  # data-download=true, and the fetch failed
        print(f"fl-async bench: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fl-async bench: interrupted; run the same command again to resume")
        write_report(out, title=_title(spec), grid_size=spec.grid)
        return 130
    total = len(planned_runs(spec, out))
    print(
        f"fl-async bench: {len(outcome.ran)} ran, {len(outcome.skipped)} already done, "
        f"{len(outcome.failed)} failed, {len(outcome.blocked)} waiting for SSGD, of {total}, "
        f"in {time.monotonic() - started:.0f} s"
        + (f" ({len(outcome.held)} done in the records folder {records})" if records else "")
    )
    try:
        paths = write_report(out, title=_title(spec), grid_size=spec.grid)
    except InvalidArgument as error:  # a history in the folder that is damaged or foreign
        return error_exit(error)
    print(f"fl-async bench: report in {out / REPORT}; wrote {', '.join(str(p) for p in paths)}")
    return 1 if outcome.failed or outcome.blocked else 0


def run_report(out: Path, grid: int | None) -> int:
    """``--report-only``: the report of a suite folder's histories or of a records folder."""
    if not out.is_dir():
        return error_exit(f"no suite folder {out}")
    try:
        if is_records_folder(out):
            if grid is not None:
                raise InvalidArgument(
                    "--grid does not apply to a records folder (its grids are in its records): "
                    "export the suite again with --grid"
                )
            paths = write_records_report(out, _recorded_title(out))
        else:
            paths = write_report(out, _recorded_title(out), _recorded_grid(out, grid))
    except InvalidArgument as error:
        return error_exit(error)
    print(f"fl-async bench: report in {out / REPORT}; wrote {', '.join(str(p) for p in paths)}")
    return 0


def run_export(out: Path, dest: Path, grid: int | None, *, merge: bool = False) -> int:
    """``--export DIR``: the records of the suite folder's finished runs, written into DIR
    (``merge``: added to the records folder DIR, keeping the records it holds)."""
    try:
        grid_size = _recorded_grid(out, grid) if out.is_dir() else DEFAULT_GRID
        if merge:
            paths, notes = merge_suite(out, dest, grid_size)
        else:
            paths, notes = export_suite(out, dest, grid_size), []
    except InvalidArgument as error:
        return error_exit(error)
    for note in notes:
        print(f"fl-async bench: {note}")
    action = "merged" if merge else "exported"
    print(f"fl-async bench: {action} {len(paths) - 1} runs of {out} to {dest}")
    return 0


def check_suite_folder(out: Path) -> None:
    """A records folder holds no runs to resume: refuse to run a suite into it."""
    if out.is_dir() and is_records_folder(out):
        raise SuiteError(f"{out} is a records folder: use --report-only, or another --out")


def error_exit(error: object) -> int:
    """Print ``error`` as fl-async bench's and return 2 (bad input)."""
    print(f"fl-async bench: error: {error}", file=sys.stderr)
    return 2


def check_dataset(spec: SuiteSpec) -> None:
    """Read the dataset's labels once before any run starts, so a missing or unknown dataset
    stops the suite with the loader's message instead of failing every run; with
    ``data-download=true`` in ``--run-config``, fetch a missing one first (DownloadError if
    that fails)."""
    from fl_async.data import load_labels
    from fl_async.data.download import ensure, is_downloadable

    root = spec.extra.get("data-root") or None
    root = str(root) if root else None
    if spec.extra.get("data-download") is True:
        fetched = ensure(spec.dataset, root=root, report=print)
        if fetched is not None:
            print(f"fl-async bench: {fetched.summary()}")
    try:
        load_labels(spec.dataset, root=root)
    except (FileNotFoundError, ValueError) as error:
        fetch = ""
        if isinstance(error, FileNotFoundError) and is_downloadable(spec.dataset):
            fetch = ", or add data-download=true to --run-config"
        raise SuiteError(f"--dataset {spec.dataset!r}: {error}{fetch}") from error


def _recorded_title(out: Path) -> str:
    """The title of the suite the folder holds (``--report-only`` takes no suite options)."""
    settings = _recorded_settings(out)
    if not settings:
        return "fl-async bench"
    return (
        f"fl-async bench: scenario {settings['scenario']} ({settings['description']}), "
        f"{settings['dataset']}, {settings['nodes']} nodes"
    )


def _recorded_grid(out: Path, given: int | None) -> int:
    """G of a derived grid for ``--report-only``: ``--grid`` if given, else the suite's."""
    if given is not None:
        return given  # build_spec checked it
    return int(_recorded_settings(out).get("grid") or DEFAULT_GRID)


def _recorded_settings(out: Path) -> dict:
    """The suite's settings: a suite folder's latest call, or a records folder's settings."""
    path = out / SUITE_FILE
    suite = read_json(path, "suite file") if path.is_file() else {}
    return suite.get("latest") or suite.get("settings") or {}


def _title(spec: SuiteSpec) -> str:
    return (
        f"fl-async bench: scenario {spec.scenario.name} ({spec.scenario.description}), "
        f"{spec.dataset}, {spec.nodes} nodes"
    )


def write_choice(out: Path, grid: SweepGrid, strategies: tuple[str, ...], size: int | None) -> int:
    """A sweep's choice from the runs (or records) in ``out``, written to ``out/tuned.json``
    and one line per strategy printed; 1 when a strategy got no choice."""
    try:
        settings = _recorded_settings(out)
        records = read_records(out, _recorded_grid(out, size))
    except InvalidArgument as error:
        return error_exit(error)
    record = tuned_record(grid, strategies, records, settings)
    path = write_tuned(out / TUNED_FILE, record)
    for strategy in strategies:
        pick = record["chosen"].get(strategy)
        if pick is None:
            print(f"fl-async bench: sweep: {strategy}: no point ran on every split and seed")
            continue
        print(
            f"fl-async bench: sweep: {strategy}: {pick['name']} "
            f"{_settings_text(pick['run-config'])}, final accuracy "
            f"{100 * pick['final-accuracy']:.1f}%, sigma_acc {100 * pick['sigma-acc']:.2f} pts "
            f"over {pick['runs']} runs"
        )
    print(f"fl-async bench: sweep: the chosen settings in {path}; run them with --tuned {path}")
    return 0 if len(record["chosen"]) == len(strategies) else 1


def _settings_text(settings: dict) -> str:
    return "(" + " ".join(f"{k}={v}" for k, v in settings.items()) + ")"
