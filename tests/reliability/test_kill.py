"""The kill test in CI: seeded scenarios of SIGKILLs of the provider's state workers, of PySpark
workers running ``keyed_process`` and of the whole application, at every crash point the job
reaches (commits, snapshot uploads, cleanup, provider maintenance), each run compared batch by
batch with the model of an uninterrupted run. See ``killtest.py``; a longer randomized run is
``python bench/kill_test.py``. A failure message names the seed: ``plan(seed, ...)`` rebuilds it."""

from __future__ import annotations

import pytest

from killtest import all_targets, check, ci_scenarios, run_scenario

pytestmark = pytest.mark.spark

#: Two scenarios: every (role, point) is scheduled once, dealt out over them; each also kills
#: the whole application at a crash point, and the last one at a random time as well.
SEEDS = [2024, 7]
SCENARIOS = ci_scenarios(SEEDS)


def test_the_ci_scenarios_cover_every_crash_point_of_both_kinds_of_worker():
    scheduled = sorted((e.role, e.point) for s in SCENARIOS for e in s.entries)
    assert scheduled == sorted(all_targets())
    assert all(any(e.job for e in s.entries) for s in SCENARIOS) and SCENARIOS[-1].timed_kill


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[f"seed{s}" for s in SEEDS])
def test_killed_workers_and_applications_give_the_output_of_an_uninterrupted_run(tmp_path, scenario):
    outcome = run_scenario(scenario, str(tmp_path))
    check(outcome)
    print(scenario.describe(), f"- {outcome.starts} starts", *outcome.notes, sep="\n")
