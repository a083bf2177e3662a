"""Home's story of the bundled SmolLM2 pair: the healthy draft's training curve, read from the build's
TRAINING_CURVE.json, said per epoch."""

from __future__ import annotations

import json

from backend.defaults import REPO


def test_the_final_drafts_epochs_are_read_from_the_builds_curve():
    from backend.service.demo_story import demo_story
    from ui.home import _drafts_text

    story = demo_story(str(REPO / "demo/smollm2/target"))
    built = json.loads((REPO / "demo/smollm2/drafts/TRAINING_CURVE.json").read_text())["runs"]["final"]
    per_epoch = [c["heldout_accept_length"] for c in built["curve"]]
    assert (
        story.final_curve.per_epoch == per_epoch and story.final_curve.chosen_epoch == built["chosen_epoch"]
    )
    said = _drafts_text(story)
    assert f"trained {len(per_epoch)} epochs on the target's own answers" in said
    assert (
        f"(per epoch: {', '.join(f'{v:.2f}' for v in per_epoch)}; epoch {built['chosen_epoch']} kept)" in said
    )
    toy = demo_story(str(REPO / "demo/target"))
    assert toy.final_curve is None and "trained fully; the healthy reference" in _drafts_text(toy)
