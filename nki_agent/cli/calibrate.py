"""``nki-agent calibrate [--target trn1] [--csv FILE] [--out DIR]``: fit the cost model's constants to measurements.

The measurements are the rows of ``--csv`` (``kernel,task,target,measured_us[,kernel_name]``, an
optional header row, ``#`` comments; relative paths are relative to the CSV's folder) plus the ones
``profile --runner`` recorded (``measurements.py``; a kernel whose file changed since is skipped).
Each distinct kernel is traced again in this machine's jail (``api.estimate``, never in this
process) for the model's prediction with its sensitivities to the model's constants; the (estimate,
measured µs) pairs go to the cost package's ``calibration.fit(pairs, target) -> (constants,
error_before, error_after)``, which owns the fit and its error measure (the geometric mean of
max(predicted/measured, measured/predicted): 1 is exact). ``calibration.save`` writes the constants to
``nki-agent-calibration-<target>.json`` in ``--out`` (default: the config folder, env
``NKI_AGENT_CONFIG_DIR`` or ``~/.config/nki-agent``).

Exit status: 0 written, 1 nothing to fit (no measurements, no predictions, or no cost model), 2
usage error (an unreadable or malformed CSV, an unknown target, an unwritable ``--out``).
"""

from __future__ import annotations

import csv
import dataclasses
import importlib
import io
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from ..toolchain import api
from nki_agent.toolchain.protocol.cost import CostEstimate
from . import cost_view, measurements, options
from .render import console, err_console

MAX_CSV_BYTES = 4 << 20
MAX_ROWS = 10_000  # each row is a traced launch: far more than a calibration needs
FIELDS = ("kernel", "task", "target", "measured_us", "kernel_name")

Pair = tuple[CostEstimate, float]  # the model's estimate of a launch, and the latency measured for it (µs)
Fit = Callable[[Sequence[Pair], str], tuple[Any, float, float]]


def calibration_file(target: str) -> str:
    return f"nki-agent-calibration-{target}.json"


def _calibration() -> Any:
    """The cost package's ``calibration`` module, or None where it cannot be imported."""
    try:
        return importlib.import_module("nki_agent.toolchain.cost.calibration")
    except ImportError:
        return None


def fitter() -> Fit | None:
    """``cost.calibration.fit`` (``Pair``s of an estimate with sensitivities and the measured µs → constants,
    error before, error after), or None without a cost model."""
    fit = getattr(_calibration(), "fit", None)
    return fit if callable(fit) else None


def read_csv(path: str, target: str) -> tuple[list[measurements.Measurement], int]:
    """The CSV's rows for ``target`` and how many rows were for other targets. Bad input: ``BadParameter``."""
    p = Path(path).expanduser()
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_CSV_BYTES + 1)
    except OSError as e:
        raise typer.BadParameter(f"cannot read {path}: {e.strerror or e}", param_hint="--csv") from None
    if len(data) > MAX_CSV_BYTES:
        raise typer.BadParameter(f"{path} is larger than {MAX_CSV_BYTES >> 20} MiB", param_hint="--csv")
    base = p.resolve().parent
    rows: list[measurements.Measurement] = []
    other = 0
    for n, cells in enumerate(csv.reader(io.StringIO(data.decode("utf-8", errors="replace"))), start=1):
        cells = [c.strip() for c in cells]
        if not any(cells) or cells[0].startswith("#") or (n == 1 and cells[0].lower() == "kernel"):
            continue
        m = _row(cells, base, f"{path}:{n}")
        if m.target != target:
            other += 1
        elif len(rows) >= MAX_ROWS:
            raise typer.BadParameter(f"{path}: more than {MAX_ROWS} rows", param_hint="--csv")
        else:
            rows.append(m)
    return rows, other


def _row(cells: list[str], base: Path, where: str) -> measurements.Measurement:
    if len(cells) not in (4, 5) or not all(cells[:4]):
        raise typer.BadParameter(f"{where}: expected {','.join(FIELDS[:4])}[,kernel_name]", param_hint="--csv")
    try:
        measured = float(cells[3])
    except ValueError:
        measured = math.nan
    if not (math.isfinite(measured) and measured > 0):
        raise typer.BadParameter(f"{where}: measured_us {cells[3]!r} is not a positive number", param_hint="--csv")
    try:
        target = options.validate_target(cells[2]) or cells[2]
    except typer.BadParameter:
        raise typer.BadParameter(f"{where}: unknown target {cells[2]!r}", param_hint="--csv") from None
    kernel, task = (str(base / c) if not os.path.isabs(c) else c for c in (cells[0], cells[1]))
    return measurements.Measurement(kernel=kernel, task=task, target=target, measured_us=measured,
                                    kernel_name=(cells[4] or None) if len(cells) == 5 else None)


def predictions(rows: Sequence[measurements.Measurement], target: str,
                timeout: float) -> tuple[list[tuple[measurements.Measurement, CostEstimate]], list[tuple[str, str]]]:
    """Each row with the model's estimate of its kernel (one jailed trace per distinct kernel), and the rows
    skipped with why."""
    traced: dict[tuple[str, str, str | None], CostEstimate | str] = {}
    pairs: list[tuple[measurements.Measurement, CostEstimate]] = []
    skipped: list[tuple[str, str]] = []
    for m in rows:
        why = _stale(m)
        if why:
            skipped.append((m.kernel, why))
            continue
        key = (m.kernel, m.task, m.kernel_name)
        if key not in traced:
            traced[key] = _trace(m, target, timeout)
        est = traced[key]
        if isinstance(est, str):
            skipped.append((m.kernel, est))
        else:
            pairs.append((m, est))
    return pairs, skipped


def _stale(m: measurements.Measurement) -> str:
    for what, path in (("kernel", m.kernel), ("task", m.task)):
        if not os.path.isfile(path):
            return f"the {what} file {path} does not exist"
    if m.kernel_sha256 and measurements.file_sha256(m.kernel) != m.kernel_sha256:
        return "the kernel changed since it was measured"
    return ""


def _trace(m: measurements.Measurement, target: str, timeout: float) -> CostEstimate | str:
    res = api.estimate(m.kernel, m.task, target=target, kernel_name=m.kernel_name, timeout=timeout,
                       sensitivities=True)
    if res.estimate is not None:
        return res.estimate
    problems = res.problem_list()
    return problems[0].message if problems else "the cost model made no estimate"


def write_constants(constants: Any, folder: Path, target: str, pairs: int, before: float, after: float) -> Path:
    """The fitted constants as ``nki-agent-calibration-<target>.json`` in ``folder`` (written atomically):
    by ``cost.calibration.save`` (the format its loader reads), else as their plain JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / calibration_file(target)
    tmp = folder / f".{path.name}.{os.getpid()}.tmp"
    save = getattr(_calibration(), "save", None)
    try:
        if callable(save):
            save(constants, tmp, target=target, pairs=pairs, error_before=before, error_after=after)
        else:
            body = {"target": target, "constants": _plain(constants), "pairs": pairs, "error_before": before,
                    "error_after": after}
            tmp.write_text(json.dumps(body, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _plain(constants: Any) -> Any:
    if hasattr(constants, "free_values"):
        return constants.free_values()
    if hasattr(constants, "model_dump"):
        return constants.model_dump(mode="json")
    if dataclasses.is_dataclass(constants) and not isinstance(constants, type):
        return dataclasses.asdict(constants)
    return constants


def _pairs_table(pairs: Sequence[tuple[measurements.Measurement, CostEstimate]]) -> Table:
    t = Table(title="measured vs estimated (before the fit)", title_justify="left", title_style="bold", box=None)
    for c in ("kernel", "measured", "est.", "est./measured"):
        t.add_column(c, justify="left" if c == "kernel" else "right")
    for m, est in pairs:
        shown = "/".join(Path(m.kernel).parts[-2:]) + (f" ({m.kernel_name})" if m.kernel_name else "")
        t.add_row(Text(shown),
                  cost_view.us(m.measured_us), cost_view.us(est.latency_us), f"{est.latency_us / m.measured_us:.2f}x")
    return t


def command(
    target: str = typer.Option("trn1", "--target", help="Target whose measurements are fitted (trn1, trn2, trn3)."),
    csv_file: str | None = typer.Option(None, "--csv", metavar="FILE",
                                        help="Measurements: rows kernel,task,target,measured_us[,kernel_name]."),
    out: str | None = typer.Option(None, "--out", metavar="DIR", help="Folder of the calibration file "
                                   f"(default: ${measurements.CONFIG_ENV} or ~/.config/nki-agent)."),
    timeout: float = options.Timeout,
) -> None:
    """Fit the cost model's constants to measured latencies (a CSV and those profile --runner recorded)."""
    target = options.validate_target(target) or "trn1"
    rows, other = read_csv(csv_file, target) if csv_file else ([], 0)
    rows += list(measurements.read(target=target))
    if other:
        console.print(f"{other} CSV row(s) for other targets skipped (this calibration is {target})", markup=False)
    if not rows:
        err_console.print(f"no measurements for {target}: give --csv FILE, or profile kernels on a runner "
                          f"(nki-agent profile --runner URL records them)", markup=False)
        raise typer.Exit(1)
    fit = fitter()
    if fit is None:
        err_console.print("the cost model's calibration (nki_agent.toolchain.cost.calibration.fit) is not "
                          "available in this version", markup=False)
        raise typer.Exit(1)
    pairs, skipped = predictions(rows, target, timeout)
    for kernel, why in skipped:
        console.print(f"skipped {kernel}: {why}", markup=False)
    if not pairs:
        err_console.print("no measurement could be paired with an estimate: nothing to fit", markup=False)
        raise typer.Exit(1)
    console.print(_pairs_table(pairs))
    constants, before, after = fit([(est, m.measured_us) for m, est in pairs], target)
    try:
        path = write_constants(constants, Path(out).expanduser() if out else measurements.config_dir(), target,
                               len(pairs), before, after)
    except OSError as e:
        err_console.print(f"error: cannot write the calibration: {e}", markup=False)
        raise typer.Exit(2) from None
    console.print(f"{len(pairs)} pair(s) on {target}: error before ×{before:.3g}, after ×{after:.3g} "
                  "(geometric mean of the estimate's ratio to the measurement; ×1 is exact)", markup=False)
    console.print(f"calibration written to {path}", markup=False)
