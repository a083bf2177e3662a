"""`lint --llamacpp`: what a llama-server command feeds the draft (the GGUF's own target_layers when the
file is here, else what llama.cpp's converter writes from the config) and the flags that change the run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.cli import cli_json, run_cli

TOY = Path("demo")  # 12 layers; drafts declare nested [1, 5, 8] = HF [2, 6, 9] = llama.cpp's defaults


def draft_with_nested(tmp_path: Path, nested: list[int]) -> Path:
    folder = tmp_path / "draft"
    shutil.copytree(TOY / "drafts" / "final", folder)
    config = json.loads((folder / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = nested
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def gguf_with_layers(path: Path, layers: list[int]) -> Path:
    """A GGUF header as llama.cpp's converter writes an EAGLE-3 draft's (arch eagle3, target_layers)."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "eagle3")
    writer.add_array("eagle3.target_layers", layers)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def lint(*args: str) -> dict:
    return cli_json("lint", "--target", str(TOY / "target"), *args)


def test_llamacpp_feeding_its_defaults_to_a_draft_trained_elsewhere_is_an_error_with_the_fix(tmp_path):
    draft = draft_with_nested(tmp_path, [0, 3, 6])  # trained on HF [1, 4, 7]
    report = lint(
        "--draft", str(draft), "--llamacpp", "llama-server -m t.gguf -md d.gguf --spec-type draft-eagle3"
    )
    codes = [f["code"] for f in report["findings"]]
    assert codes[0] == "aux-ids-llamacpp" and report["errors"] == 1
    first = report["findings"][0]
    assert "feeds HF [2, 6, 9]" in first["message"] and "trained on HF [1, 4, 7]" in first["message"]
    assert (
        '"eagle_aux_hidden_state_layer_ids": [1, 4, 7]' in first["fix"]
        and "convert the draft" in first["fix"]
    )
    assert "draft-length" in codes and report["effective"]["num_speculative_tokens"] == 3


def test_the_gguf_on_disk_says_what_runs(tmp_path):
    draft = draft_with_nested(tmp_path, [0, 3, 6])
    fixed = gguf_with_layers(tmp_path / "fixed.gguf", [1, 4, 7])
    command = f"llama-server -m t.gguf -md {fixed} --spec-type draft-eagle3 --spec-draft-n-max 4"
    report = lint("--draft", str(draft), "--llamacpp", command)
    assert report["errors"] == 0 and report["effective"]["aux_hf_indices"] == [1, 4, 7]
    stale = gguf_with_layers(tmp_path / "stale.gguf", [2, 6, 9])  # converted before the fix
    report = lint("--draft", str(draft), "--llamacpp", command.replace(str(fixed), str(stale)))
    assert report["findings"][0]["code"] == "aux-ids-llamacpp"
    assert f"{stale} says" in report["findings"][0]["message"]


def test_flags_that_change_the_run_are_named(tmp_path):
    report = lint(
        "--draft", str(TOY / "drafts" / "final"),
        "--llamacpp", "llama-server -m t.gguf -md d.gguf --spec-draft-p-min=0.6 -np 4 --spec-draft-n-max 4",
    )  # fmt: skip
    codes = {f["code"]: f["severity"] for f in report["findings"]}
    assert codes == {"spec-type": "error", "draft-p-min": "warning", "slots": "info"}, codes
    report = lint(
        "--draft", str(TOY / "drafts" / "final"),
        "--llamacpp", "llama-server -m t.gguf --spec-draft-model d.gguf --spec-type draft-eagle3 --spec-draft-n-min 2",
    )  # fmt: skip
    codes = {f["code"]: f["severity"] for f in report["findings"]}
    assert codes == {"draft-n-min": "warning", "draft-length": "info"}, codes
    done = run_cli("lint", "--target", str(TOY / "target"), "--llamacpp", "llama-server -m t.gguf -md")
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].endswith("-md has no value")
    # without --draft (or --target) the lint reads the bundled pair's, as every command that loads one does
    done = run_cli("lint", "--target", str(TOY / "target"), "--llamacpp", "llama-server -m t.gguf", "--json")
    assert done.returncode == 0, done.stderr


def test_a_kept_probe_that_rejects_the_declared_wiring_is_what_the_llamacpp_lint_holds_to(tmp_path, db_url):
    """Issue 65 row 1: the probe found the bundled miswired draft trained on other layers than it
    declares; the SGLang and vLLM lints said so and the llama.cpp lint passed it (declared reading only).
    Now the three lints read the same kept probe, on the CLI and on the page (service.serving_lint.lint)."""
    from backend.defaults import DEMO_DRAFTS, DEMO_TARGET
    from backend.diagnostics.probe_settings import ProbeResult
    from backend.service import kept_results, serving_lint

    draft = tmp_path / "miswired"
    shutil.copytree(DEMO_DRAFTS / "miswired", draft)
    target = str(DEMO_TARGET)
    kept_results.remember_probe(
        target,
        str(draft),
        ProbeResult.from_dict({"confirmed": False, "best": {"aux_hf_indices": [0, 2, 15]}}),
        db_url,
    )
    kept_results._PROBES.clear()  # only the database remembers
    command = "llama-server -m t.gguf -md d.gguf --spec-type draft-eagle3 --spec-draft-n-max 8"
    report = cli_json(
        "lint", "--target", target, "--draft", str(draft), "--db", db_url, "--llamacpp", command
    )
    wiring = [f for f in report["findings"] if f["code"].startswith("aux-ids")]
    assert [f["code"] for f in wiring] == ["aux-ids-not-trained"] and report["errors"] == 1
    assert "trained on HF [0, 2, 15]" in wiring[0]["message"]
    assert '"eagle_aux_hidden_state_layer_ids": [0, 2, 15]' in wiring[0]["fix"]
    page = serving_lint.lint(str(draft), command, "llama.cpp", target, db_url)
    assert json.loads(json.dumps(page.to_dict())) == report  # one answer on the page and the CLI
    fed = report["effective"]["aux_hf_indices"]  # a GGUF written with the trained layers passes
    fixed = gguf_with_layers(tmp_path / "fixed.gguf", [0, 2, 15])
    passed = cli_json(
        "lint", "--target", target, "--draft", str(draft), "--db", db_url,
        "--llamacpp", f"llama-server -m t.gguf -md {fixed} --spec-type draft-eagle3 --spec-draft-n-max 8",
    )  # fmt: skip
    assert fed != [0, 2, 15] and passed["errors"] == 0
    assert [f["code"] for f in passed["findings"] if f["code"].startswith("aux-ids")] == ["aux-ids-trained"]


def test_a_removed_flag_is_an_error_and_the_command_is_rewritten(tmp_path):
    """Issue 65 row 6: llama-server 11434 refuses --draft-max and its kin (common/arg.cpp, removed
    params); the lint said it would run --spec-draft-n-max 3."""
    draft = draft_with_nested(tmp_path, [1, 5, 8])
    command = "llama-server -m t.gguf -md d.gguf --spec-type draft-eagle3 --draft-max 16 --draft-min=2"
    report = lint("--draft", str(draft), "--llamacpp", command)
    removed = [f for f in report["findings"] if f["code"] == "removed-flag"]
    assert len(removed) == 2 and report["errors"] == 2
    assert "--draft-max 16" in removed[0]["message"] and removed[0]["fix"] == "Write --spec-draft-n-max 16."
    assert report["effective_flags"] is None and report["effective"]["num_speculative_tokens"] == 16
    assert report["recommended_command"] == (
        "llama-server -m t.gguf -md d.gguf --spec-type draft-eagle3 --spec-draft-n-max 16 --spec-draft-n-min 2"
    )
    text = run_cli("lint", "--target", str(TOY / "target"), "--draft", str(draft), "--llamacpp", command)
    assert "--spec-draft-n-max 3" not in text.stdout and "removed-flag" in text.stdout
