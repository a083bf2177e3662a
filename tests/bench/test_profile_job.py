"""The job-runner profile runs on the demo pair and names the stages it times."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # loads the demo pair and profiles two jobs


def test_profile_job_prints_own_and_cumulative_tops(capsys):
    from bench.profile_job import main

    main(["--pair", "demo", "--prompts", "1", "--tokens", "16", "--top", "5"])
    out = capsys.readouterr().out
    head, own, cumulative = out.split("\n\n")
    assert "1 jobs, 16 tokens" in head and "accept length" in head
    assert len(own.splitlines()) == 6 and len(cumulative.splitlines()) == 6
    assert "run_plan" in cumulative  # the job runner itself heads SpecLens's cumulative list
