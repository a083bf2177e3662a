"""A running task's progress line says about how long is left at the pace so far (issue 65 row 20: a
6-minute Diagnose said only how long it had run)."""

from __future__ import annotations


def test_time_left_at_the_pace_so_far_once_there_is_a_pace():
    from ui.taskview import time_left

    assert time_left(0.5, 60) == " · about 60 s left at this pace"
    assert time_left(0.25, 120) == " · about 6 min left at this pace"
    assert time_left(0.02, 60) == "" and time_left(0.5, 5) == "" and time_left(1.0, 60) == ""
