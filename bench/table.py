"""A measurement as the fixed-width text table the suite prints after each workload."""

from __future__ import annotations

from bench.measurement import Measurement
from snipjit.benchmark import text_table


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(measurement: Measurement) -> str:
    """One row per engine: latency, spread, ratio to the baseline, bandwidth, load and first-run times,
    error against the reference, and a note (what the engine is, or why it did not run)."""
    m = measurement
    base = m.baseline or "-"
    rows = [["engine", "median ms", "p25-p75 ms", f"x {base}", "GB/s", "load s", "1st run s", "max|err|", "note"]]
    for r in m.results:
        quartiles = r.quartiles_s()
        spread = f"{quartiles[0] * 1e3:.3g}-{quartiles[1] * 1e3:.3g}" if quartiles else "-"
        note = r.note if r.status == "ok" else f"{r.status}: {r.note}"
        note = note if len(note) <= 100 else note[:97] + "..."
        rows.append([
            r.engine,
            _fmt(r.median_s and r.median_s * 1e3, ".4g"),
            spread,
            _fmt(m.ratio(r), ".2f"),
            _fmt(m.gb_per_s(r), ".1f"),
            _fmt(r.load_s, ".2f"),
            _fmt(r.first_run_s, ".3f"),
            _fmt(r.max_abs_err, ".1e"),
            note,
        ])
    title = f"{m.name}: {m.description}" if m.description else m.name
    reference = f"errors vs {m.reference}" if m.reference else "no reference outputs"
    return "\n".join([title, f"({reference}; x {base} = latency / {base}'s latency in the same round, median over the rounds)", *text_table(rows)])
