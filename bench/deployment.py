"""Deployment figures: loading a saved model in a fresh process, throughput against latency mode, and two
one-thread models side by side.

    python -m bench.deployment [--seconds 3] [--rounds 5] [--loads 5]

- **load**: a BERT-base-size encoder (12 layers, hidden 768, random weights, exported from transformers)
  compiled once and saved; then `snipjit.load` in fresh processes with an empty kernel cache, timed apart
  from `import snipjit`, and the first run after it. The median over `--loads` processes.
- **throughput**: the 6-layer bench encoder at batch 1, sequence 128. Latency mode (`snipjit.compile`'s
  default: one stream on every thread) against throughput mode (`hint="throughput"`: a stream per thread,
  driven through `start_async`), alternated round by round, inferences per second, median over rounds.
  ONNX Runtime beside it the same way (one session on all threads; one session per stream thread, each
  with a thread per stream).
- **side by side**: two models compiled with `num_threads=1`, each run in a thread of its own, against
  the same runs one after the other: the ratio of wall times (2.0 would mean no serialisation at all).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from .machine import machine_info
from .models import BertSpec, bert_feeds, bert_model

BASE = BertSpec(layers=12, hidden=768, heads=12, intermediate=3072)
SMALL = BertSpec()

LOAD = """
import sys, time
t0 = time.perf_counter()
import snipjit, numpy as np
t1 = time.perf_counter()
cm = snipjit.load(sys.argv[1])
t2 = time.perf_counter()
feeds = {"input_ids": np.ones((1, 128), np.int64), "attention_mask": np.ones((1, 128), np.int64)}
cm.run(feeds)
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def load_times(loads: int) -> dict:
    import snipjit
    with tempfile.TemporaryDirectory() as tmp:
        artifact = Path(tmp) / "bert_base.snipjit"
        start = time.perf_counter()
        cm = snipjit.compile(bert_model(BASE))
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        cm.save(artifact)
        save_s = time.perf_counter() - start
        env = {**os.environ, "SNIPJIT_CACHE_DIR": str(Path(tmp) / "empty-cache")}
        runs = []
        for _ in range(loads):
            out = subprocess.run([sys.executable, "-c", LOAD, str(artifact)], env=env, capture_output=True,
                                 text=True, check=True)
            runs.append([float(v) for v in out.stdout.split()])
        imports, load, first = (statistics.median(column) for column in zip(*runs))
        return {"artifact_mb": artifact.stat().st_size / 2**20, "compile_s": compile_s, "save_s": save_s,
                "import_s": imports, "load_s": load, "first_run_s": first, "processes": loads}


def _rate(run_for, seconds: float) -> float:
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        count += run_for()
    return count / (time.perf_counter() - start)


def throughput(seconds: float, rounds: int) -> dict:
    import snipjit
    path = str(bert_model(SMALL))
    feeds = bert_feeds(1, 128, SMALL.vocab, np.random.default_rng(0))
    latency = snipjit.compile(path)
    streams = snipjit.compile(path, hint="throughput")
    n = streams.settings.streams

    def one() -> int:
        latency.run(feeds)
        return 1

    def batch_of_async() -> int:   # keep every stream busy: n in flight, refilled as they finish
        futures = [streams.start_async(feeds) for _ in range(2 * n)]
        for f in futures:
            f.result()
        return len(futures)

    engines = {"snipjit latency": one, f"snipjit throughput ({n} streams)": batch_of_async}
    engines.update(_ort_engines(path, feeds, n))
    for run in engines.values():
        run()
    rates: dict[str, list[float]] = {name: [] for name in engines}
    for r in range(rounds):
        for name in list(engines)[r % len(engines):] + list(engines)[:r % len(engines)]:
            rates[name].append(_rate(engines[name], seconds))
            time.sleep(0.2)
    return {name: statistics.median(v) for name, v in rates.items()}


def _ort_engines(path: str, feeds: dict, streams: int) -> dict:
    try:
        import onnxruntime as ort
    except ImportError:
        return {}
    from snipjit.benchmark import usable_cores
    threads = usable_cores()

    def session(intra: int):
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    whole, shared = session(threads), session(max(1, threads // streams))

    def one() -> int:
        whole.run(None, feeds)
        return 1

    def concurrent() -> int:
        workers = [threading.Thread(target=lambda: [shared.run(None, feeds) for _ in range(2)])
                   for _ in range(streams)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return 2 * streams

    return {"onnxruntime latency": one, f"onnxruntime throughput ({streams} threads)": concurrent}


def side_by_side(rounds: int) -> dict:
    import snipjit
    path = str(bert_model(SMALL))
    feeds = bert_feeds(1, 128, SMALL.vocab, np.random.default_rng(0))
    models = [snipjit.compile(path, num_threads=1) for _ in range(2)]
    runs = 8

    def work(cm):
        for _ in range(runs):
            cm.run(feeds)

    for cm in models:
        cm.run(feeds)
    ratios = []
    for _ in range(rounds):
        start = time.perf_counter()
        for cm in models:
            work(cm)
        sequential = time.perf_counter() - start
        threads = [threading.Thread(target=work, args=(cm,)) for cm in models]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ratios.append(sequential / (time.perf_counter() - start))
    return {"speedup_side_by_side": statistics.median(ratios), "rounds": rounds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    machine = machine_info()
    print(f"machine: {machine['cpu']}, snipjit ISA {machine['isa']}, flags {' '.join(machine['cpu_flags'])}, "
          f"{machine['usable_cores']} usable cores")
    result = {"machine": machine, "load": load_times(args.loads)}
    print("load of a saved BERT-base (fresh process, empty kernel cache, medians):",
          json.dumps({k: round(v, 3) for k, v in result["load"].items()}))
    result["throughput"] = throughput(args.seconds, args.rounds)
    for name, rate in result["throughput"].items():
        print(f"  {name:<36} {rate:7.1f} inferences/s")
    result["side_by_side"] = side_by_side(args.rounds)
    print("two 1-thread models in two threads vs one after the other:",
          f"{result['side_by_side']['speedup_side_by_side']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
