"""The numpy/torch bridge and the weight sources: same type, dtype, device and shape back; same numbers."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from grader.groups.models import GroupResult
from grader.integrations import redistribute_advantages, weights_from_results
from grader.integrations.weights import call_weights_fn
from grader.redistribution.redistribute import redistribute_batch

ADVANTAGES = np.array([0.8, 0.8, 0.8, -1.2, 0.5, -0.5])
GROUPS = np.array([0, 0, 0, 0, 1, 1])
PASSED = np.array([True, True, True, False, True, False])
WEIGHTS = np.array([1.0, 0.75, 0.5, 1.0, 1.0, 1.0])


def test_numpy_matches_redistribute_batch() -> None:
    got, reasons = redistribute_advantages(ADVANTAGES, GROUPS, PASSED, WEIGHTS)
    expected, expected_reasons = redistribute_batch(ADVANTAGES, GROUPS, PASSED, WEIGHTS)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_array_equal(got, expected)
    assert reasons == expected_reasons == {1: "uniform weights"}


def test_numpy_float32_two_d_keeps_dtype_and_shape() -> None:
    mask = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=np.float32)
    adv = (ADVANTAGES[:, None] * mask).astype(np.float32)
    got, _ = redistribute_advantages(adv, GROUPS, PASSED, WEIGHTS, response_mask=mask)
    assert got.dtype == np.float32 and got.shape == adv.shape
    assert np.all(got[mask == 0] == 0)


def test_numpy_never_imports_torch() -> None:
    code = (
        "import sys; import numpy as np; from grader.integrations import redistribute_advantages;"
        "redistribute_advantages(np.array([1.0, 1.0, -2.0]), [0, 0, 0], [1, 1, 0], [1.0, 0.5, 1.0]);"
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


torch_only = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None, reason="torch is not installed"
)


@torch_only
@pytest.mark.parametrize("dtype_name", ["float32", "float64", "float16", "bfloat16"])
def test_torch_keeps_type_dtype_device(dtype_name: str) -> None:
    import torch

    dtype = getattr(torch, dtype_name)
    adv = torch.tensor(ADVANTAGES, dtype=dtype)
    got, reasons = redistribute_advantages(
        adv, torch.tensor(GROUPS), torch.tensor(PASSED), torch.tensor(WEIGHTS, dtype=dtype)
    )
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.device == adv.device
    assert got.shape == adv.shape and got is not adv
    expected, _ = redistribute_batch(adv.float().numpy(), GROUPS, PASSED, WEIGHTS)
    tolerance = {"float32": 1e-6, "float64": 1e-12, "float16": 1e-3, "bfloat16": 1e-2}[dtype_name]
    np.testing.assert_allclose(got.float().numpy(), expected, rtol=tolerance)
    # Unchanged rows (failing, and the uniform group) keep their bits.
    assert torch.equal(got[3:], adv[3:])
    assert reasons == {1: "uniform weights"}
    assert torch.equal(adv, torch.tensor(ADVANTAGES, dtype=dtype))  # input not mutated


@torch_only
def test_torch_two_d_with_grad_and_string_ids() -> None:
    import torch

    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 1, 0]])
    adv = (torch.tensor(ADVANTAGES)[:, None] * mask).requires_grad_(True)
    uids = np.array(["u1"] * 4 + ["u2"] * 2, dtype=object)
    got, reasons = redistribute_advantages(adv, uids, PASSED, WEIGHTS, response_mask=mask)
    assert got.shape == (6, 3) and not got.requires_grad
    expected, _ = redistribute_batch(adv.detach().numpy(), uids, PASSED, WEIGHTS, mask.numpy())
    np.testing.assert_allclose(got.numpy(), expected)
    assert reasons == {"u2": "uniform weights"}


def result(group_id: str, weights: dict[str, float], status: str = "graded") -> GroupResult:
    return GroupResult(group_id=group_id, status=status, grader="heuristic", weights=weights)  # type: ignore[arg-type]


def test_weights_from_results_by_id_and_by_group() -> None:
    results = [result("g1", {"a": 1.0, "b": 0.5}), result("g2", {}, status="skipped")]
    assert weights_from_results(results, ["a", "b", "c", "x"]).tolist() == [1.0, 0.5, 1.0, 1.0]
    clash = [result("g1", {"a": 0.5}), result("g2", {"a": 0.7})]
    with pytest.raises(ValueError, match="pass group_ids"):
        weights_from_results(clash, ["a"])
    assert weights_from_results(clash, ["a", "a", "a"], group_ids=["g1", "g2", "g3"]).tolist() == [
        0.5,
        0.7,
        1.0,
    ]


def test_call_weights_fn_checks_shape_and_values() -> None:
    passed = np.array([True, False])
    with pytest.raises(ValueError, match="shape"):
        call_weights_fn(lambda g, p, b: [1.0], np.zeros(2), passed, None)
    with pytest.raises(ValueError, match="non-finite"):
        call_weights_fn(lambda g, p, b: [1.0, float("nan")], np.zeros(2), passed, None)
