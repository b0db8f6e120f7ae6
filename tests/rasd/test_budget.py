"""Cost-aware budget: the plan follows the cost curve and the acceptance estimates."""

from __future__ import annotations

import pytest

from localrag.config import RasdConfig
from localrag.rasd.budget import Budget, Calibrator, CostModel, plan


def test_plan_prefers_plain_when_verification_is_expensive():
    cpu = CostModel([1, 2, 4, 8, 16], [0.007, 0.0146, 0.021, 0.031, 0.051])  # compute-bound
    assert plan([0.3, 0.2, 0.1], cpu) == (0, 1.0)
    k, gain = plan([0.95, 0.9, 0.85, 0.8, 0.75, 0.7], cpu)
    assert k == 6 and gain > 1.0


def test_plan_goes_wide_when_verification_is_cheap():
    gpu = CostModel([1, 64], [0.010, 0.012])  # overhead-bound: wide trees are almost free
    k, gain = plan([0.3] * 40, gpu)
    assert k == 40 and gain > 5


def beta_mean_less_sd(accepted: float, rejected: float) -> float:
    """Mean less one standard deviation of Beta(accepted, rejected) (a and b > 0)."""
    a, b = accepted, rejected
    return a / (a + b) - (a * b / ((a + b) ** 2 * (a + b + 1))) ** 0.5


def test_a_draft_buckets_prior_is_the_middle_of_its_confidence_range():
    """Draft probabilities are taken as they are: an unseen bucket's prior is the midpoint of the
    confidences it holds, for every confidence from 0 to 1."""
    ranges = list(zip((0.0, *Calibrator.EDGES), (*Calibrator.EDGES, 1.0), strict=True))
    for c in [i / 200 for i in range(201)]:
        lo, hi = next((lo, hi) for lo, hi in ranges if lo <= c < hi or c == hi == 1.0)
        assert Calibrator().mean(Calibrator().key("d1", c)) == pytest.approx((lo + hi) / 2), c


def test_calibrator_learns():
    cal = Calibrator()
    key = cal.key("d1", 0.6)
    assert cal.mean(key) == pytest.approx((0.5 + 0.75) / 2)  # prior: the middle of its bucket, 0.5 to 0.75
    # planned with a lower bound while data are few: the prior, weight 2, as Beta(2 m, 2 (1 - m))
    m, w = (0.5 + 0.75) / 2, 2.0
    assert cal.p(key) == pytest.approx(beta_mean_less_sd(w * m, w * (1 - m)))
    for _ in range(20):
        cal.update(key, False)
    assert cal.p(key) < 0.1
    for _ in range(200):
        cal.update(key, True)
    assert abs(cal.p(key) - cal.mean(key)) < 0.05 and cal.mean(key) > 0.85  # the bound tightens with data
    assert cal.key("r2", 0.95, 9) == ("r2", 6, 5)  # match class 5: 8-15 tokens
    assert cal.key("r2", 0.95, -1)[2] == 0  # a retrieval tree's root (depth 0 below no match): no match
    # a retrieval bucket's prior trusts its confidence by its match class: a 1-token match's
    # only continuation is no sure thing, a 16-token match's nearly is
    assert cal.mean(cal.key("r2", 0.95, 1)) < 0.3 < 0.85 < cal.mean(cal.key("r2", 0.95, 16))


def test_calibrator_new_bucket_starts_from_its_source_in_its_match_class():
    """A model that never accepts retrieved text after 3-token matches: an unseen retrieval bucket
    of that match class starts low; one after an 8-token match starts from its class's trust (the
    many short matches of a chat must not drag the next long copy down), and a draft one as it is."""
    cal = Calibrator()
    for _ in range(30):
        cal.update(cal.key("r2", 0.6, 3), False)
    fresh = cal.key("r2", 0.95, 3)
    assert cal.mean(fresh) < 0.15
    # another match class's data leave it as it was: its prior, below the top bucket's midpoint
    # (0.9 to 1) and at most the 89% of first nodes measured accepted after 8 or more matched tokens
    long_copy = cal.mean(cal.key("r2", 0.95, 9))
    assert long_copy == pytest.approx(Calibrator().mean(cal.key("r2", 0.95, 9))) and 0.5 < long_copy <= 0.89
    assert cal.mean(cal.key("d1", 0.95, 0)) == 0.95
    for _ in range(20):  # the bucket's own data still decides
        cal.update(fresh, True)
    assert cal.mean(fresh) > 0.8


def test_cost_model_interpolates_and_extrapolates():
    c = CostModel([1, 2, 4], [1.0, 2.0, 4.0])
    assert c(3) == 3.0 and c(8) == 8.0


def test_cost_model_heals_a_stale_curve_online():
    """A curve cached under load (5x too slow) converges to the quiet machine's within a few dozen steps."""
    true = CostModel([1, 2, 4, 8, 16], [0.008, 0.012, 0.016, 0.024, 0.040])
    stale = CostModel(true.ks, true.sec * 5)
    for _ in range(60):  # plain steps only see k=1, yet the whole curve follows the load change
        stale.observe(1, true(1))
    assert abs(stale(1) / true(1) - 1) < 0.1
    assert abs(stale(8) / true(8) - 1) < 0.3
    for step in range(200):  # speculative steps of several sizes fix the shape
        k = (3, 6, 12)[step % 3]
        stale.observe(k, true(k))
        stale.observe(1, true(1))
    for k in (1, 3, 6, 12):
        assert abs(stale(k) / true(k) - 1) < 0.1, k
    stale.observe(4, 100.0)  # one outlier moves a point by at most 4 ** 0.1
    assert stale(4) < true(4) * 4**0.1 * 1.1


def test_realism_tracks_realised_over_expected_gain_within_bounds():
    cal = Calibrator()
    assert cal.realism_of("r") == 1.0
    for _ in range(30):  # steps that deliver a quarter of what they promised
        cal.observe_gain(0.5, 2.0, "r")
    assert cal.realism_of("r") == pytest.approx(0.25, abs=0.01) and cal.n_gains == 30
    for _ in range(30):  # estimates that turn out pessimistic raise it, up to the cap
        cal.observe_gain(4.0, 1.0, "r")
    assert cal.realism_of("r") == pytest.approx(1.5)
    cal.observe_gain(0.5, 1.0, "d")  # each scorer has its own: draft estimates err apart from retrieval's
    assert cal.realism_of("d") == pytest.approx(0.9) and cal.realism_of("r") == pytest.approx(1.5)


def test_a_forced_probe_verifies_only_the_best_node():
    from localrag.rasd.phases import Proposal, choose
    from localrag.rasd.tree import RETRIEVAL, TokenTree

    tree = TokenTree(7)
    a = tree.add_node(0, 1, 0.9, RETRIEVAL)
    tree.add_node(a, 2, 0.8, RETRIEVAL)
    tree.add_node(0, 3, 0.5, RETRIEVAL)
    prop = Proposal(tree, [1.0, 0.9, 0.8, 0.5], draft_scored=False)
    acc = [1.0, 0.2, 0.2, 0.1]  # too low to pay on a steep cost curve
    cost = CostModel([1, 2, 4], [0.010, 0.014, 0.022])
    assert choose(prop, acc, RasdConfig(), cost, 0.0, False, 8) == ([], 1.0)
    keep, gain = choose(prop, acc, RasdConfig(), cost, 0.0, True, 8)
    assert keep == [0, 1]
    assert gain == pytest.approx(1.2 * 0.010 / 0.014)


def test_draft_bandit_a_winning_probe_restores_the_draft():
    from localrag.rasd.budget import DraftBandit

    arm = DraftBandit(plain_rate=20.0, probe_every=4)
    assert arm.use_draft()  # untried: the draft runs first
    arm.record(True, 10.0)  # a losing first draft step (its tree was not worth verifying)
    for _ in range(4):
        assert not arm.use_draft()
        arm.record(False, 20.0)
    assert arm.use_draft()  # the probe
    arm.record(True, 30.0)  # wins: its rate replaces the stale 10 tok/s
    assert arm.rate["draft"] == 30.0 and arm.use_draft() and arm.wait == 4
    arm.record(True, 5.0)  # an ordinary draft step blends in (EMA 0.2)
    assert arm.rate["draft"] == pytest.approx(25.0) and arm.use_draft()


def test_draft_bandit_lost_probes_double_the_wait():
    from localrag.rasd.budget import DraftBandit

    arm = DraftBandit(plain_rate=20.0, probe_every=2)
    arm.record(True, 10.0)
    waits = []
    for _ in range(3):
        while not arm.use_draft():
            arm.record(False, 20.0)
        arm.record(True, 10.0)  # the probe loses
        waits.append(arm.wait)
    assert waits == [4, 8, 16]


def test_the_draft_chain_limit_is_the_best_fully_accepted_chain():
    """k drafted tokens all accepted: k + 1 tokens for k draft forwards and one verify over k + 1."""
    from localrag.rasd.budget import draft_chain_limit

    cost = CostModel([1, 2, 4], [0.010, 0.012, 0.016])  # T(3) interpolates to 0.014
    best = max(2 * 0.010 / (0.012 + 0.004), 3 * 0.010 / (0.014 + 0.008), 4 * 0.010 / (0.016 + 0.012))
    assert draft_chain_limit(cost, 0.004, 3) == pytest.approx(best) == pytest.approx(1.4285714)
    steep = CostModel([1, 2, 4], [0.010, 0.020, 0.040])  # k tokens cost k forwards: no chain pays
    assert draft_chain_limit(steep, 0.004, 3) < 1.0


def test_a_draft_the_cost_curves_rule_out_starts_behind_with_its_probes_far_apart():
    from localrag.rasd.budget import DraftBandit
    from localrag.rasd.cost import DRAFT_PROBE_CAP

    arm = DraftBandit(plain_rate=20.0, probe_every=4, draft_rate=15.0)  # at best 0.75x plain
    assert not arm.use_draft() and arm.wait == DRAFT_PROBE_CAP
    hopeful = DraftBandit(plain_rate=20.0, probe_every=4, draft_rate=30.0)  # could pay: tried first
    assert hopeful.use_draft() and hopeful.wait == 4
    hopeful.record(True, 12.0)  # its first realised rate replaces the prior
    assert hopeful.rate["draft"] == 12.0 and not hopeful.use_draft()


def test_the_draft_reads_a_prompt_only_if_its_steps_can_win_the_reading_back():
    """lag * read_s <= tokens * (1 / plain rate - 1 / draft rate): at 20 tok/s plain and at most
    40 tok/s drafting, a 64-token answer saves at most 1.6 s, so 1.6 s of reading is the most
    it pays (200 tokens at 8 ms), and nothing is worth reading for a draft that cannot win."""
    cost = CostModel([1, 2], [0.05, 0.06])
    budget = Budget(RasdConfig(), cost, Calibrator(), max_nodes=8, draft_limit=2.0)  # 40 tok/s at best
    assert budget.draft_repays_reading(200, 0.008, 64)
    assert not budget.draft_repays_reading(201, 0.008, 64)
    assert not budget.draft_repays_reading(1000, 0.008, 64) and budget.draft_repays_reading(1000, 0.008, 320)
    ruled_out = Budget(RasdConfig(), cost, Calibrator(), max_nodes=8, draft_limit=0.9)
    assert not ruled_out.draft_repays_reading(1, 0.008, 64)
    unbudgeted = Budget(RasdConfig(use_budget=False), cost, Calibrator(), max_nodes=8, draft_limit=0.9)
    assert unbudgeted.draft_repays_reading(1000, 0.008, 64)
    # a draft that ran and lost reads nothing until its probe is due; the probe, which doubts the
    # realised rate, is weighed at the most the cost curves allow again
    arm = budget.draft_arm
    arm.record(True, 10.0)  # half plain's rate
    assert not arm.use_draft() and not budget.draft_repays_reading(10, 0.008, 64)
    while not arm.probe_due():
        arm.record(False, 20.0)
    assert budget.draft_repays_reading(200, 0.008, 64) and not budget.draft_repays_reading(201, 0.008, 64)


def test_sibling_estimates_are_exclusive():
    """The target accepts at most one child of a node: their estimates never sum past the parent's."""
    from localrag.rasd.phases import Proposal, estimate, keys_for
    from localrag.rasd.tree import RETRIEVAL, TokenTree

    cal = Calibrator()
    for _ in range(50):
        cal.update(cal.key("r2", 0.95, 2), True)
    tree = TokenTree(7)
    kids = [tree.add_node(0, t, 0.95, RETRIEVAL) for t in (1, 2, 3)]
    grandkid = tree.add_node(kids[0], 4, 0.95, RETRIEVAL)
    prop = Proposal(tree, [1.0, 0.95, 0.95, 0.95, 0.95], draft_scored=False, match_len=2)
    keys = keys_for(prop, cal)
    a = estimate(prop, keys, cal)
    p = cal.p(keys[1])
    assert p > 0.8
    assert sum(a[k] for k in kids) == pytest.approx(1.0)  # 3 x p would be 2.5 expected tokens
    # an only child keeps its conditional, that of a node continuing a 3-token match (2 + its depth - 1)
    assert keys[grandkid][2] == 3
    assert a[grandkid] == pytest.approx(a[kids[0]] * cal.p(keys[grandkid]))


def _copy_plan(match_len: int, copy_runs: bool, cal: Calibrator | None = None) -> tuple[int, float]:
    """The plan of a 12-token unique continuation of a `match_len`-token match, on a steep CPU curve."""
    from localrag.rasd.phases import Proposal
    from localrag.rasd.tree import RETRIEVAL, TokenTree

    tree = TokenTree(7)
    tree.add_path(list(range(100, 112)), scores=[1.0] * 12, source=RETRIEVAL)
    prop = Proposal(tree, [1.0] * len(tree), draft_scored=False, match_len=match_len)
    cpu = CostModel([1, 2, 16], [0.04, 0.05, 0.134])
    budget = Budget(RasdConfig(copy_runs=copy_runs, calibrate=False), cpu, cal or Calibrator(), 48)
    p = budget.plan(prop, False, 12)
    return len(p.keep) - 1 if p.keep else 0, p.gain


def test_a_run_of_accepted_ancestors_raises_a_buckets_estimate_while_its_data_are_few():
    """Calibrator.p(key, run): the bucket's posterior after `run` more accepted trials (the ancestors
    a(v) conditions on); no run is the estimate as before."""
    cal = Calibrator()
    key = cal.key("r2", 1.0, 16)
    runs = [cal.p(key, j) for j in range(8)]
    assert runs == sorted(runs) and runs[0] < runs[1] and runs[7] > 0.85
    for _ in range(300):
        cal.update(key, True)
    for _ in range(30):
        cal.update(key, False)
    assert abs(cal.p(key, 8) - cal.p(key, 0)) < 0.03  # with data, a run hardly moves it


def test_copy_runs_verify_a_long_matchs_chain_deeper_from_a_fresh_calibrator():
    """A fresh decoder (no data) facing a long document match: without copy_runs its chain is
    estimated as independent draws and cut short; with them, deeper and at a higher expected gain."""
    for match_len in (8, 16):
        k_off, gain_off = _copy_plan(match_len, False)
        k_on, gain_on = _copy_plan(match_len, True)
        assert k_on > k_off >= 1 and gain_on > gain_off
    # a short match's first nodes each change class with depth (1, 2, 3 tokens), so no run forms
    # where it would matter, and nothing is verified either way
    assert _copy_plan(1, True) == _copy_plan(1, False) == (0, 1.0)
