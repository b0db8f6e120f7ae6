"""Cost-aware budget: the plan follows the cost curve and the acceptance estimates."""

from __future__ import annotations

from localrag.spec.budget import Calibrator, CostModel, plan


def test_plan_prefers_plain_when_verification_is_expensive():
    cpu = CostModel([1, 2, 4, 8, 16], [0.007, 0.0146, 0.021, 0.031, 0.051])  # compute-bound
    assert plan([0.3, 0.2, 0.1], cpu) == (0, 1.0)
    k, gain = plan([0.95, 0.9, 0.85, 0.8, 0.75, 0.7], cpu)
    assert k == 6 and gain > 1.0


def test_plan_goes_wide_when_verification_is_cheap():
    gpu = CostModel([1, 64], [0.010, 0.012])  # overhead-bound: wide trees are almost free
    k, gain = plan([0.3] * 40, gpu)
    assert k == 40 and gain > 5


def test_calibrator_learns():
    cal = Calibrator()
    key = cal.key("r2", 0.6, 3)
    assert cal.p(key) == 0.625  # prior: the bucket's own confidence
    for _ in range(20):
        cal.update(key, False)
    assert cal.p(key) < 0.1
    assert cal.key("r2", 0.95, 9) == ("r2", 6, 4)


def test_cost_model_interpolates_and_extrapolates():
    c = CostModel([1, 2, 4], [1.0, 2.0, 4.0])
    assert c(3) == 3.0 and c(8) == 8.0
