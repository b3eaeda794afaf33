"""The blocks of rows an attention kernel with Brgemms computes per iteration."""
from snipjit.snippets.brgemm_blocks import row_block


def test_row_blocks():
    assert row_block(1024, 1024) == 1024                    # 1M scores: the whole head
    assert row_block(2048, 2048) == 128                     # 256K scores a block
    assert row_block(1500, 1500) == 150                     # the largest divisor that fits
    assert row_block(4099, 4099) is None                    # prime: blocks of one row would repack Kᵀ per row
