"""The inline serving-flag lint the Diagnostics page runs (no model is loaded)."""

from __future__ import annotations

import pytest

from backend import BadInput
from tests.support.lint import CHAIN, make_draft, make_lint_target, sglang


def test_lint_for_either_engine(tmp_path):
    import json

    from backend.service.checks import lint

    target, draft = make_lint_target(tmp_path / "target"), make_draft(tmp_path, "good", aux_ids=[1, 15, 28])
    report = lint(
        str(draft), sglang(draft, CHAIN, "--context-length 2048", target=target), "SGLang", str(target)
    )
    assert report["findings"] == [] and report["effective"] == {
        "num_steps": 3,
        "topk": 1,
        "num_draft_tokens": 4,
    }
    config = json.dumps({"method": "eagle", "model": str(draft), "num_speculative_tokens": 1})
    report = lint(str(draft), f"vllm serve m --speculative-config '{config}'", "vLLM", None)
    assert {"eagle-algorithm-eagle3-draft", "single-draft-step"} <= {f["code"] for f in report["findings"]}
    with pytest.raises(BadInput, match="no --speculative-algorithm"):
        lint(str(draft), "python -m sglang.launch_server --model-path x", "SGLang", None)
