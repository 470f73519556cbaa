"""Walsh–Hadamard transform and the randomized Hadamard transform (RHT)."""

import numpy as np
import pytest
import scipy.linalg
import torch

from thc.errors import ConfigError, THCError
from thc.hadamard import (
    MAX_RADIX,
    fwht,
    inverse_randomized_hadamard,
    randomized_hadamard,
    sign_bits,
    sign_mask,
    stage_radices,
)
from thc.workspace import Workspace

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("n", [1, 2, 4, 64, 128, 2048])
def test_fwht_matches_the_dense_hadamard_matrix(n):
    x = torch.randn(3, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    h = torch.from_numpy(scipy.linalg.hadamard(n).astype(np.float64))
    torch.testing.assert_close(fwht(x), x @ h.T, rtol=1e-12, atol=1e-9)


def test_fwht_is_its_own_inverse_up_to_n_and_leaves_input_alone():
    x = torch.randn(2**14, generator=torch.Generator().manual_seed(1))  # three stages: 32 x 32 x 16
    before = x.clone()
    y = fwht(x, workspace=Workspace())
    assert torch.equal(x, before)
    torch.testing.assert_close(fwht(y) / x.numel(), x, rtol=0, atol=1e-5)


def test_fwht_fuses_scale_and_shift():
    x = torch.randn(2, 2**10, dtype=torch.float64)
    torch.testing.assert_close(fwht(x, scale=0.25, shift=-3.0), fwht(x) * 0.25 - 3.0)


def test_stages_are_small_radices_whose_product_is_n():
    for k in range(0, 27):
        radices = stage_radices(2**k)
        assert int(np.prod(radices)) == 2**k and all(2 <= r <= MAX_RADIX for r in radices)
    assert stage_radices(2**24) == [64, 64, 64, 64]


@pytest.mark.parametrize("n", [0, 3, 1000])
def test_non_power_of_two_lengths_are_refused(n):
    with pytest.raises(ConfigError, match="power of two"):
        stage_radices(n)
    assert issubclass(ConfigError, THCError) and issubclass(THCError, ValueError)


def test_rht_is_orthonormal_and_the_inverse_recovers_the_input():
    x = torch.randn(2**16, generator=torch.Generator().manual_seed(2)) * 3
    r = randomized_hadamard(x, seed=7, step=3)
    assert abs(float(r.norm() / x.norm()) - 1) < 1e-5
    back = inverse_randomized_hadamard(r, seed=7, step=3)
    assert float((back - x).abs().max()) < 1e-5 * float(x.abs().max())
    # the wrong signs (another round) do not invert it
    assert float((inverse_randomized_hadamard(r, seed=7, step=4) - x).norm()) > 0.5 * float(x.norm())


def test_rht_spreads_a_spike_over_all_coordinates():
    x = torch.zeros(2**12)
    x[5] = 1.0
    r = randomized_hadamard(x, seed=0)
    torch.testing.assert_close(r.abs(), torch.full_like(r, 2**-6))


def test_signs_are_shared_per_round_and_refreshed_between_rounds():
    a = sign_bits(seed=1, step=5, key=0, chunk=2, n=4096)
    assert np.array_equal(a, sign_bits(seed=1, step=5, key=0, chunk=2, n=4096))
    ones_a = np.unpackbits(a)
    for other in (
        sign_bits(1, 6, 0, 2, 4096),
        sign_bits(1, 5, 1, 2, 4096),
        sign_bits(1, 5, 0, 3, 4096),
        sign_bits(2, 5, 0, 2, 4096),
    ):
        agree = float(np.mean(ones_a == np.unpackbits(other)))
        assert 0.45 < agree < 0.55  # independent: half the signs agree (4096 bits: 6 sigma is 0.047)
    assert 0.45 < float(ones_a.mean()) < 0.55
    mask = sign_mask(a, 4096)
    assert set(np.unique(mask).tolist()) == {0, 0x80000000}
