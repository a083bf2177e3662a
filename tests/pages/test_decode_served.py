"""Decode page: an engine check that served the run shows the engine's own accepted counts beside the
replay's (engine_check.served_beside). The run is stored by hand (no model) and the check's result.json
is written as a check keeps it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.pages.test_compare import NEWLINE, SELF, SPACE, store_run
from tests.support.pages import ok, page


def test_a_run_an_engine_check_served_shows_the_engines_counts(db):
    from backend.service.engine_check_result import ServedBeside, served_beside
    from backend.service.runs import get_run

    steps = [{"position": 2, "drafted": [SELF, SPACE], "accepted": 2, "bonus": NEWLINE}] * 2
    run_id = store_run(db, "final", steps)
    folder = Path(db[len("sqlite:///") :]).parent / "artifacts" / "engine-checks" / "20250101-000000"
    folder.mkdir(parents=True)
    row = {"replay_run": run_id, "prompt_ids": [], "served_per_step": [2, 1], "served_accept_length": 2.5}
    check = {"engine": "llamacpp", "url": "http://127.0.0.1:8080", "num_steps": 2, "rows": [row]}
    (folder / "result.json").write_text(json.dumps(check))

    served = served_beside(db, get_run(db, run_id))
    assert (served.engine, served.served_per_step, served.same_run, served.launched) == (
        "llama.cpp",
        [2, 1],
        True,
        False,
    )
    assert ServedBeside.from_dict(served.to_dict()) == served
    app = page("2_Decode")
    app.session_state["global_run_id"] = run_id
    app = ok(app.run())
    assert any(h.value == "Served by llama.cpp" for h in app.subheader)
    said = app.warning[-1].value
    assert said.startswith("llama.cpp at http://127.0.0.1:8080 (check 20250101-000000): first difference")
    assert "at step 2: llama.cpp accepted 1, the replay 2" in said
