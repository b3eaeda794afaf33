"""The blocks of scores an attention kernel with Brgemms keeps in its per-thread scratchpad: a head's
whole block of rows (`subgraph_compiler.brgemm_rows`), or blocks of its rows (`SplitDimensionM`)."""
from __future__ import annotations

BLOCK_ELEMENTS = 1 << 20       # the most scores of a head computed whole, a row block per iteration (4 MB)
ROW_BLOCK_ELEMENTS = 1 << 18   # the most scores of a block of rows (1 MB, Zen 4's L2; see SplitDimensionM)
MIN_ROWS = 8                   # fewer rows per block pack Kᵀ too often for the rows they serve


def row_block(rows: int, keys: int) -> int | None:
    """The rows of a block for M = `rows` and `keys` scores per row: all of them when their scores fit the
    kernel's whole block (BLOCK_ELEMENTS), else the largest divisor of `rows` whose scores fit
    ROW_BLOCK_ELEMENTS, None when that is below MIN_ROWS."""
    if rows * keys <= BLOCK_ELEMENTS:
        return rows
    fitting = max(1, min(ROW_BLOCK_ELEMENTS, BLOCK_ELEMENTS) // max(keys, 1))
    m = max(d for d in range(1, min(rows, fitting) + 1) if rows % d == 0)
    return m if m >= MIN_ROWS else None
