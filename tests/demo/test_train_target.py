"""The demo target's training helpers: when the greedy-repetition monitor runs."""

from __future__ import annotations


def test_the_monitor_runs_every_n_updates_but_not_after_the_last_and_restores_train_mode():
    import torch  # here, not at collection (tests/conftest.py)

    from demo.train_target import watch

    model = torch.nn.Linear(2, 2)
    model.train()
    seen, modes = [], []

    def monitor(m):
        modes.append(m.training)
        return "ok"

    for done in range(1, 11):
        watch(model, monitor, 4, done, 10, seen.append, "step")
    assert seen == ["step 4: ok", "step 8: ok"] and modes == [False, False] and model.training
    watch(model, monitor, 5, 10, 10, seen.append, "step")  # the last update: the caller logs the final state
    watch(model, None, 1, 1, 10, seen.append, "step")
    assert len(seen) == 2
