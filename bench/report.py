"""The suite's records: a JSON file with the machine, the settings and every measurement, and a bar
chart of each engine's latency relative to snipjit's."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from bench.runner import SuiteResult

PREFERRED_BASELINE = "snipjit"


def write_json(result: SuiteResult, path: Path) -> None:
    record = {
        "machine": result.machine,
        "settings": asdict(result.settings),
        "engines": result.engines,
        "workloads": [m.summary() for m in result.measurements],
        "skipped_workloads": result.skipped,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")


def write_chart(result: SuiteResult, path: Path) -> None:
    """Grouped bars from 1 on a log scale, one group per workload: below 1 an engine is faster than
    snipjit, above it slower. A workload whose snipjit row did not run is drawn against the engine
    named under its label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    measurements = [m for m in result.measurements if m.baseline]
    bars = [e for e in result.engines if any(_ratio(m, e) is not None and e != m.baseline for m in measurements)]
    colors = {e: plt.get_cmap("tab10")(i % 10) for i, e in enumerate(result.engines)}
    width = 0.84 / max(len(bars), 1)
    figure, axes = plt.subplots(figsize=(max(8.0, 1.25 * len(measurements) + 3), 7.5), layout="constrained")
    ratios, handles = [], {}
    for slot, engine in enumerate(bars):
        for group, m in enumerate(measurements):
            ratio = _ratio(m, engine)
            if ratio is None or engine == m.baseline:
                continue
            x = group - 0.42 + width * (slot + 0.5)
            handles[engine] = axes.bar(x, ratio - 1, width, bottom=1, color=colors[engine])
            axes.annotate(
                f"{ratio:.2g}", (x, ratio), xytext=(0, 2 if ratio >= 1 else -2), textcoords="offset points",
                ha="center", va="bottom" if ratio >= 1 else "top", fontsize=6, rotation=90,
            )
            ratios.append(ratio)
    axes.axhline(1.0, color="black", linewidth=1)
    axes.set_yscale("log")
    if ratios:
        span = max(max(ratios), 1 / min(ratios), 1.5) * 1.6
        axes.set_ylim(1 / span, span)
    axes.yaxis.set_major_locator(LogLocator(base=2))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}" if v >= 1 else f"1/{1 / v:g}"))
    axes.yaxis.set_minor_formatter(NullFormatter())
    axes.set_xticks(range(len(measurements)), [_label(m) for m in measurements], rotation=30, ha="right")
    axes.set_xlim(-0.6, len(measurements) - 0.4)
    axes.set_ylabel(f"latency / {PREFERRED_BASELINE} latency  (log scale; > 1: slower than {PREFERRED_BASELINE})")
    axes.grid(axis="y", alpha=0.3)
    machine = result.machine
    axes.set_title(f"{machine['cpu']}, {result.settings.threads} threads, {machine['date'][:10]}", fontsize=10)
    if bars:
        axes.legend(
            [handles[e] for e in bars], bars, ncols=min(len(bars), 6),
            loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _ratio(measurement, engine: str) -> float | None:
    result = measurement.result(engine)
    return None if result is None else measurement.ratio(result)


def _label(measurement) -> str:
    if measurement.baseline == PREFERRED_BASELINE:
        return measurement.name
    return f"{measurement.name}\n(vs {measurement.baseline})"
