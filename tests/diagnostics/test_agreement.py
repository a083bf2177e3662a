"""Training accuracy vs live acceptance: the mis-wired draft is flagged, the right one is not."""

from __future__ import annotations

from tests.support.models import TRAINED


def test_accuracy_vs_live_flags_the_miswired_draft(bigram_setup):
    from backend.diagnostics.agreement import Agreement, draft_summary, teacher_vs_live
    from backend.engine.replay import ReplayConfig
    from backend.run.wiring import Wiring
    from tests.support.models import load_draft

    target, samples = bigram_setup.target, bigram_setup.samples
    draft, wiring = load_draft(bigram_setup.root / "miswired", target)
    seen = []
    rows = teacher_vs_live(
        target,
        draft,
        wiring,
        samples[:2],
        ReplayConfig(3, 24),
        progress=lambda f, m: seen.append((f, m)),
        training_wiring=Wiring(tuple(TRAINED), "claimed training wiring"),
    )
    assert all(r.flagged and r.acc_0 > 0.5 and r.live_accept_length < 1.2 for r in rows)
    assert seen == [
        (0.0, "live replays of 2 samples, batched"),
        (0.5, "teacher-forced, sample 1/2"),
        (0.75, "teacher-forced, sample 2/2"),
    ]
    summary = draft_summary(rows)
    assert summary.flagged and summary.samples == 2 and summary.live_over_predicted < summary.flag_ratio
    assert summary.mean_acc_0 == sum(r.acc_0 for r in rows) / 2
    # the page's result, written with its JSON keys and read back as it was
    raw = Agreement(rows, summary).to_dict()
    assert set(raw["rows"][0]) == {
        "sample #", "source", "acc_0", "acc_per_step", "predicted accept length", "live accept length", "flagged"
    }  # fmt: skip
    assert raw["summary"]["mean acc_0"] == summary.mean_acc_0 and raw["summary"]["live / predicted"] < 0.75
    assert Agreement.from_dict(raw) == Agreement(rows, summary)
    right, right_wiring = load_draft(bigram_setup.root / "right", target)
    rows = teacher_vs_live(target, right, right_wiring, samples[:2], ReplayConfig(3, 24))
    assert not any(r.flagged for r in rows) and not draft_summary(rows).flagged
