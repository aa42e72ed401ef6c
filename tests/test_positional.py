"""Section 3.5: the sinusoidal table as written, its linear-shift property, and learned positions."""
import math

import pytest
import torch

from nmt_toolkit.errors import UsageError
from nmt_toolkit.modules.positional import (LearnedPositionalEmbedding, SinusoidalPositionalEmbedding,
                                            sinusoidal_table)


@pytest.mark.parametrize("dim", [16, 9])
def test_table_equals_formula_elementwise_interleaved(dim):
    table = sinusoidal_table(60, dim)
    for pos in range(60):
        for j in range(dim):
            i = j // 2
            angle = pos / 10000 ** (2 * i / dim)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert abs(table[pos, j].item() - expected) < 1e-6, (pos, j)
    # interleaving, not concatenation: dims 0 and 1 are sin/cos of the same (fastest) frequency
    assert torch.allclose(table[:, 0], torch.sin(torch.arange(60.0)), atol=1e-6)
    assert torch.allclose(table[:, 1], torch.cos(torch.arange(60.0)), atol=1e-6)


def test_any_length_on_demand_and_offsets():
    pe = SinusoidalPositionalEmbedding(32, init_size=8)
    long = pe(3000)
    assert long.shape == (3000, 32)
    assert torch.allclose(long, sinusoidal_table(3000, 32), atol=0)
    assert torch.equal(pe(5, offset=2000), long[2000:2005])


def test_shift_by_k_is_one_linear_map_for_every_position():
    """PE(pos+k) = M_k PE(pos): M_k fitted by least squares on a few positions holds for all others."""
    dim, k = 64, 7
    table = sinusoidal_table(600, dim).double()
    fit = torch.arange(0, 600 - k, 4)  # ~150 positions over the whole range (≥ dim unknowns per column)
    m_k = torch.linalg.lstsq(table[fit], table[fit + k]).solution  # row-vector convention: PE(p) @ M = PE(p+k)
    others = torch.arange(1, 600 - k, 4)  # positions not used in the fit
    err = (table[others] @ m_k - table[others + k]).abs().max().item()
    assert err < 1e-4, err
    # and analytically: a block-diagonal rotation by the angle k·w_i
    rot = torch.zeros(dim, dim, dtype=torch.float64)
    for i in range(dim // 2):
        w = k / 10000 ** (2 * i / dim)
        c, s = math.cos(w), math.sin(w)
        # [sin(a+b), cos(a+b)] = [sin a, cos a] @ [[c, -s], [s, c]]
        rot[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    assert (table[:-k] @ rot - table[k:]).abs().max().item() < 1e-5


def test_learned_positions_shape_and_limit():
    pe = LearnedPositionalEmbedding(10, 8)
    assert pe(4, offset=3).shape == (4, 8)
    assert torch.equal(pe(4, offset=3), pe.weight[3:7])
    with pytest.raises(UsageError, match="max-positions"):
        pe(11)
