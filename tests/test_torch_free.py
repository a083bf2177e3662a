"""The Streamlit server imports neither torch nor transformers: model work runs in the job worker, reads
that need them (a draft's tensors, a tokenizer) in the reader process (backend/service/readers.py).

The architecture test checks the pages' imports; this one runs them. A fresh interpreter plays the
server: it draws every page under Streamlit's AppTest on a database holding a replay (so Decode draws
its header, readings and reference), runs the lint on Diagnostics and Home's story, and then reports
which of the two are in its sys.modules.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.pages import REPO

SERVER = """
import json, sys
from streamlit.testing.v1 import AppTest

said = {}
for name in ("home", "1_Samples", "2_Decode", "3_Compare", "4_Diagnostics", "5_Runs", "6_Where_lost"):
    path = "app.py" if name == "home" else f"pages/{name}.py"
    app = AppTest.from_file(path, default_timeout=300).run()
    if name == "4_Diagnostics":
        app = app.button(key="lint_run").click().run()  # the lint runs inline, on the draft's config
    said[name] = {
        "exceptions": [e.message for e in app.exception],
        "text": " ".join(m.value for m in app.markdown)[:20000],
    }
from backend.service.checkpoints import drafts_for, remembered
from backend.defaults import default_target
said["drafts"] = list(drafts_for(default_target(), [p for _, p in remembered(None, "draft")]))
said["heavy"] = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(json.dumps(said))
"""


@pytest.mark.slow
def test_the_dashboard_server_imports_neither_torch_nor_transformers(tmp_path):
    db = f"sqlite:///{tmp_path / 'server.db'}"
    replay = [sys.executable, "-m", "backend", "replay", "--samples", "demo/data/eval.jsonl", "--index", "0"]
    subprocess.run([*replay, "--max-new-tokens", "16", "--db", db], cwd=REPO, check=True, capture_output=True)
    # a draft added in the dashboard (not bundled): the draft lists check it fits the target (config
    # sizes) inline
    mine = tmp_path / "my_draft"
    mine.mkdir()
    (mine / "config.json").write_text((REPO / "demo" / "drafts" / "final" / "config.json").read_text())
    remember = f"from backend.service.checkpoints import remember; remember({db!r}, 'draft', {str(mine)!r})"
    subprocess.run([sys.executable, "-c", remember], cwd=REPO, check=True, capture_output=True)
    env = {"SPECLENS_DB_URL": db, "SPECLENS_DEMO": "toy", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    server = subprocess.run(
        [sys.executable, "-c", SERVER], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert server.returncode == 0, server.stderr[-3000:]
    said = json.loads(server.stdout.strip().splitlines()[-1])
    for page, seen in said.items():
        if page not in ("heavy", "drafts"):
            assert not seen["exceptions"], (page, seen["exceptions"])
    # the inline calls did run: Home told the toy pair's story (read in the reader process), the lint
    # answered, Decode showed the stored run
    assert "What the bundled toy pair shows" in json.dumps(said["home"]) or "miswired" in said["home"]["text"]
    assert "findings" in said["4_Diagnostics"]["text"] or "will run" in said["4_Diagnostics"]["text"]
    assert "my_draft" in said["drafts"]  # the added draft was checked and listed
    assert said["heavy"] == [], said["heavy"]
