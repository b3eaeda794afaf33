"""Command line of the benchmark suite: python -m bench [--only NAMES] [--engines NAMES] ..."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import engines, report, workloads
from bench.runner import run_suite
from bench.timing import Settings


def _names(text: str, valid) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; choose from {', '.join(valid)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Time snipjit against onnxruntime, OpenVINO, NumPy, numexpr, PyTorch, hand-written C and the memory-bandwidth "
        "limit, each engine in its own process, in alternating rounds; writes OUT/latest.json and OUT/latest.png.",
    )
    parser.add_argument("--only", help="comma-separated workload names or groups (default: all); see --list")
    parser.add_argument(
        "--engines",
        type=lambda text: _names(text, engines.ALL),
        default=list(engines.ALL),
        help=f"comma-separated, from {','.join(engines.ALL)} (default: all)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of alternating engines (default: 5)")
    parser.add_argument("--threads", type=int, default=2, help="threads for every engine (default: 2)")
    parser.add_argument(
        "--round-seconds", type=float, default=0.3, help="time per engine per round (default: 0.3)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results", help="folder of latest.json/.png"
    )
    parser.add_argument("--list", action="store_true", help="list the workloads and exit")
    args = parser.parse_args(argv)

    if args.list:
        for w in workloads.WORKLOADS.values():
            print(f"{w.name:28} {w.group:12} {w.description}")
        return 0
    try:
        chosen = workloads.select(args.only)
    except ValueError as error:
        parser.error(str(error))

    settings = Settings(rounds=args.rounds, threads=args.threads, round_s=args.round_seconds)
    start = time.perf_counter()
    result = run_suite(chosen, args.engines, settings)
    report.write_json(result, args.out / "latest.json")
    report.write_chart(result, args.out / "latest.png")
    print(f"\n{len(result.measurements)} workloads in {time.perf_counter() - start:.0f} s; "
          f"wrote {args.out / 'latest.json'} and {args.out / 'latest.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
