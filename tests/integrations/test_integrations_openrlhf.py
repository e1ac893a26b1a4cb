"""OpenRLHF adapter, against a reproduction of OpenRLHF's group_norm (OpenRLHF needs GPUs to install)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the integrations extra is not installed")
from grader.integrations import openrlhf  # noqa: E402

N_PROMPTS, N_SAMPLES = 2, 4
RAW = torch.tensor([[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])


def test_uniform_weights_return_group_norm_exactly() -> None:
    normalized = openrlhf.group_norm(RAW)
    got, reasons = openrlhf.redistribute_group_norm(normalized, RAW >= 1, torch.ones_like(RAW))
    assert torch.equal(got, normalized)
    assert reasons == {0: "uniform weights", 1: "no passing trajectory"}


def test_weights_redistribute_rows_and_keep_the_sum() -> None:
    normalized = openrlhf.group_norm(RAW)
    weights = torch.tensor([[1.0, 0.5, 1.0, 0.75], [1.0, 1.0, 1.0, 1.0]])
    got, _ = openrlhf.redistribute_group_norm(normalized, RAW >= 1, weights)
    assert got.shape == (N_PROMPTS, N_SAMPLES) and got.dtype == torch.float32
    passing = RAW[0] >= 1
    assert got[0][passing].sum().item() == pytest.approx(normalized[0][passing].sum().item(), rel=1e-6)
    assert got[0, 1] < got[0, 3] < got[0, 0]
    assert got[0, 2] == normalized[0, 2] and torch.equal(got[1], normalized[1])
    lengths = torch.tensor([[10, 20, 5, 40], [1, 1, 1, 1]])
    token, _ = openrlhf.redistribute_group_norm(normalized, RAW >= 1, weights, lengths, preserve="token")
    kept = (token[0] * lengths[0])[passing].sum().item()
    assert kept == pytest.approx((normalized[0] * lengths[0])[passing].sum().item(), rel=1e-6)


def test_experiences_after_compute_advantages_and_returns() -> None:
    # What OpenRLHF's group_norm leaves on experiences with the KL as a loss: each row's normalized reward on
    # every action token. Two micro-batches, shuffled prompt order (experience.index), own padding widths.
    normalized = openrlhf.group_norm(RAW).reshape(-1)
    order = [[5, 0, 3, 1], [2, 7, 4, 6]]
    lengths = {i: 2 + i % 3 for i in range(8)}
    experiences = []
    for index in order:
        width = max(lengths[i] for i in index)
        mask = torch.tensor([[1 if t < lengths[i] else 0 for t in range(width)] for i in index])
        adv = normalized[index][:, None] * mask
        experiences.append(
            SimpleNamespace(index=index, action_mask=mask, advantages=adv, returns=adv.clone())
        )
    flat_index = np.concatenate(order)
    weights = np.array([{0: 1.0, 1: 0.5, 3: 0.75}.get(i, 1.0) for i in flat_index])
    passed = (RAW.reshape(-1) >= 1).numpy()[flat_index]
    before = [e.advantages.clone() for e in experiences]
    openrlhf.redistribute_experiences(experiences, N_SAMPLES, passed, weights)
    matrix, _ = openrlhf.redistribute_group_norm(
        openrlhf.group_norm(RAW), RAW >= 1, torch.tensor(np.array([[1.0, 0.5, 1.0, 0.75], [1.0] * 4]))
    )
    for experience, old in zip(experiences, before, strict=True):
        assert experience.advantages.shape == old.shape
        expected = matrix.reshape(-1)[experience.index][:, None] * experience.action_mask
        torch.testing.assert_close(experience.advantages, expected.float())
        assert torch.equal(experience.returns, experience.advantages)
