"""A hostile-input battery's findings on the CLI (a helper ran 438 cases; these are the ones that were
not one line and exit 2): each bad input now ends in exit 2 and one line naming the file or flag."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import REPO, run_cli

TOY_TARGET, TOY_DRAFT = REPO / "demo" / "target", REPO / "demo" / "drafts" / "final"


def refused(*args: str) -> str:
    """The command's one line on stderr; it must exit 2."""
    done = run_cli(*args)
    # the lines a terminal or a log keeps: a progress bar rewritten in place with \r is not one
    lines = [line.rsplit("\r", 1)[-1] for line in done.stderr.split("\n")]
    lines = [line for line in lines if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr[-1500:])
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args, said",
    [
        (("export", "--run", str(10**30), "--format", "csv"), "a run id is 1 to"),
        (("lost", "--runs", "1-"), "expected run ids like"),
        (("probe", "--budget", "-1"), "--budget: must be >= 0"),
        (("probe", "--live", "-1"), "--live: must be >= 0"),
        (("diagnose", "--live", "-1"), "--live: must be >= 0"),
        (("replay", "--prompt", "def f", "--index", "5"), "--index picks a sample of --samples"),
        (("preflight", "--dtype", "fp7"), "unknown dtype 'fp7'"),
        (("preflight", "--device", "quantum"), "--device 'quantum': not a device name"),
    ],
)
def test_a_flag_out_of_its_range_is_refused_before_any_work(args, said, tmp_path):
    store = () if args[0] == "preflight" else ("--db", f"sqlite:///{tmp_path / 'x.db'}")
    assert said in refused(*args, *store)


def test_paths_that_cannot_be_read_or_written_as_asked_are_named_in_one_line(tmp_path):
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    said = refused(
        "preflight", "--target", str(TOY_TARGET), "--draft", str(REPO / "demo/drafts/miswired"),
        "--engine", "vllm", "--write-fix", str(afile / "fix"),
    )  # fmt: skip
    assert said.startswith(f"error: {afile}") and "Not a directory" in said
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n")
    assert refused("observe", "--db", f"sqlite:///{tmp_path / 'o.db'}", "--requests", str(deep)) == (
        f"error: {deep}: JSON nested too deeply"
    )
    said = refused(
        "observe", "--db", f"sqlite:///{tmp_path / 'o.db'}", "--sglang-log",
        str(REPO / "demo/data/serving/sglang_seed.log"), "--draft", str(tmp_path / "nope"),
    )  # fmt: skip
    assert said == f"error: --draft {tmp_path / 'nope'}: no such directory"


def test_a_store_that_is_not_a_database_is_refused_before_the_probe_runs(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("not a database\n" * 100)
    said = refused(
        "probe", "--target", str(TOY_TARGET), "--draft", str(TOY_DRAFT), "--db", f"sqlite:///{text}",
        "--samples", str(REPO / "demo/data/eval.jsonl"), "--limit", "1",
    )  # fmt: skip
    assert str(text) in said and "file is not a database" in said


def test_a_declared_wiring_out_of_the_targets_range_fails_preflight_as_replay_refuses_it(tmp_path):
    draft = tmp_path / "draft"
    shutil.copytree(TOY_DRAFT, draft)
    config = json.loads((draft / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 5, 99]
    (draft / "config.json").write_text(json.dumps(config))
    said = refused("preflight", "--target", str(TOY_TARGET), "--draft", str(draft))
    assert f"{draft / 'config.json'}" in said and "out of range" in said
    assert (
        run_cli(
            "preflight", "--target", str(TOY_TARGET), "--draft", str(draft), "--engine", "vllm-v2"
        ).returncode
        == 0
    )
    said = refused(
        "replay", "--target", str(TOY_TARGET), "--draft", str(draft), "--prompt", "def f",
        "--max-new-tokens", "2", "--db", f"sqlite:///{tmp_path / 'r.db'}",
    )  # fmt: skip
    assert "out of range" in said and "config.json declares nested [1, 5, 99]" in said


def test_a_tokenizer_that_does_not_load_is_named(tmp_path):
    from backend.engine.loading import tokenizer_problem

    target = tmp_path / "target"
    shutil.copytree(TOY_TARGET, target)
    (target / "tokenizer.json").write_text('{"version": ')
    assert tokenizer_problem(target).startswith(f"{target / 'tokenizer.json'}: the tokenizer does not load")
    assert tokenizer_problem(tmp_path).startswith(f"{tmp_path} has no tokenizer")


class Payload:
    """A pickle that would create a file when unpickled, were it ever unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_target_whose_bin_would_run_code_is_refused_and_nothing_runs(tmp_path):
    import torch

    from backend import BadInput
    from backend.engine.loading import load_target

    target, marker = tmp_path / "target", tmp_path / "ran"
    target.mkdir()
    shutil.copy(TOY_TARGET / "config.json", target / "config.json")
    torch.save({"model.embed_tokens.weight": Payload(marker)}, target / "pytorch_model.bin")
    with pytest.raises(BadInput) as error:
        load_target(target, device="cpu")
    said = str(error.value)
    assert said.startswith(f"{target / 'pytorch_model.bin'}: it holds Python objects besides tensors")
    assert "weights_only" not in said and "\n" not in said and not marker.exists()


def test_an_empty_db_url_and_a_missing_store_are_refused_and_nothing_is_created(tmp_path):
    assert refused("lost", "--runs", "1", "--db", "") == (
        "error: --db '': an empty database URL (leave --db out for the default)"
    )
    missing = tmp_path / "none.db"
    for args in (
        ("export", "--run", "1", "--format", "csv", "--out", str(tmp_path / "o.csv")),
        ("lost", "--runs", "1"),
    ):
        said = refused(*args, "--db", f"sqlite:///{missing}")
        assert said == f"error: sqlite:///{missing}: no database there (nothing stored yet)"
    assert not missing.exists()
