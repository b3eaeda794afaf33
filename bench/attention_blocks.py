"""Long attention blocks on the Snippets kernel with Brgemms: blocks of query rows (SplitDimensionM) against a
row at a time, the attention kernel and the unfused graph.

    python -m bench.attention_blocks [--threads 2] [--rounds 5] [--budget 0.5] [--seqs 512,1024,2048]

The block is a BERT-style self-attention of 12 heads of 64 on projections [1, seq, 768] with a Gemma-2 soft
cap on the scores (30·tanh(s / 30)) and an additive key mask, which the attention kernel computes; with Erf in
the place of its Tanh, an op the attention kernel lacks, snipjit runs the block on the Snippets kernel with
Brgemms. Engines, in this one process, alternated round by round, each timed for a fixed time per round (the
figure: the median over rounds, in milliseconds per call):
- `blocks`: the Erf block as compiled (past 256K scores a head, blocks of query rows per iteration);
- `row`: the same, SplitDimensionM off (no block has `MIN_ROWS` rows), as before it: a head's rows per
  iteration up to 1M scores, else a row per iteration;
- `capped`: the soft-capped block as compiled (the attention kernel);
- `attention`: the block without the cap (the attention kernel);
- `unfused`: the capped block node by node (`mha=False`; up to 1,024 tokens, past that its scores take GBs).
"""
from __future__ import annotations

import statistics

import numpy as np

from bench.gemm import cpu_model, layer_parser, seconds_per_call, use_threads

HEADS, SIZE, CAP = 12, 64, 30.0
UNFUSED_MAX = 1024


def block_text(seq: int, cap: str) -> str:
    """The block, its scores capped by `cap` ("Tanh", "Erf"; "": none)."""
    width = HEADS * SIZE
    capped = (f"  [sd] = Div(ss, cap)\n  [st] = {cap}(sd)\n  [sc] = Mul(st, cap)\n  [sm] = Add(sc, mask)\n" if cap
              else "  [sm] = Add(ss, mask)\n")
    split = "".join(f"  [{n}r] = Reshape({n}, heads)\n  [{n}h] = Transpose({n}r) {{perm = [0, 2, {p}]}}\n"
                    for n, p in (("q", "1, 3"), ("k", "3, 1"), ("v", "1, 3")))
    return f"""graph(q: f32[1,{seq},{width}], k: f32[1,{seq},{width}], v: f32[1,{seq},{width}],
                 mask: f32[1,1,1,{seq}]) -> [y] {{
  const heads: i64[4] = [1, {seq}, {HEADS}, {SIZE}]
  const merged: i64[3] = [1, {seq}, {width}]
  const scale: f32[] = {SIZE ** -0.5}
  const cap: f32[] = {CAP}
{split}  [s] = MatMul(qh, kh)
  [ss] = Mul(s, scale)
{capped}  [p] = Softmax(sm) {{axis = -1}}
  [o] = MatMul(p, vh)
  [ot] = Transpose(o) {{perm = [0, 2, 1, 3]}}
  [y] = Reshape(ot, merged)
}}"""


def engines(seq: int) -> dict:
    """name -> a function running one call (each engine compiled with its own kernel cache)."""
    import snipjit
    from snipjit.runtime.caches import kernel_cache
    from snipjit.snippets import brgemm_blocks
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((1, seq, HEADS * SIZE), dtype=np.float32) for n in "qkv"}
    feeds["mask"] = np.where(rng.random((1, 1, 1, seq)) < 0.1, -1e9, 0).astype(np.float32)
    made = {}
    default = brgemm_blocks.MIN_ROWS
    variants = [("blocks", "Erf", {}, default), ("row", "Erf", {}, 1 << 62), ("capped", "Tanh", {}, default),
                ("attention", "", {}, default)]
    if seq <= UNFUSED_MAX:
        variants.append(("unfused", "Tanh", {"mha": False}, default))

    def run(request, min_rows: int) -> None:   # (the kernel also asks at run time, to pick its core)
        brgemm_blocks.MIN_ROWS = min_rows
        try:
            request.run(feeds)
        finally:
            brgemm_blocks.MIN_ROWS = default

    for name, cap, options, min_rows in variants:
        kernel_cache._cache = kernel_cache.KernelCache(None)
        request = snipjit.compile(snipjit.parse_graph(block_text(seq, cap)), **options).create_request()
        run(request, min_rows)   # compiles the kernel for these shapes
        made[name] = lambda r=request, m=min_rows: run(r, m)
    return made


def main(argv: list[str] | None = None) -> None:
    parser = layer_parser(__doc__, rounds=5)
    parser.set_defaults(budget=0.5)
    parser.add_argument("--seqs", default="512,1024,2048", help="sequence lengths (comma-separated)")
    args = parser.parse_args(argv)
    use_threads(args.threads)
    from snipjit.targets.llvm import jit
    print(f"{cpu_model()}, LLVM CPU {jit.host().cpu}, ISA level {jit.host().level.name}, {args.threads} threads; "
          f"{HEADS} heads of {SIZE}, soft cap {CAP:g}; milliseconds per call (median of {args.rounds} rounds)")
    print(f"{'tokens':>7} {'blocks':>9} {'row':>9} {'capped':>9} {'attention':>10} {'unfused':>9} "
          f"{'row/blocks':>11}")
    for seq in (int(s) for s in args.seqs.split(",") if s):
        runs = engines(seq)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                times[name].append(seconds_per_call(run, args.budget) * 1e3)
        ms = {name: statistics.median(t) for name, t in times.items()}
        unfused = f"{ms['unfused']:9.2f}" if "unfused" in ms else f"{'-':>9}"
        print(f"{seq:>7} {ms['blocks']:9.2f} {ms['row']:9.2f} {ms['capped']:9.2f} {ms['attention']:10.2f} {unfused} "
              f"{ms['row'] / ms['blocks']:11.2f}")


if __name__ == "__main__":
    main()
