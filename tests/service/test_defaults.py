"""Everything follows the active target (issue 40): the defaults pick the real SmolLM2 pair once it is
set up and the toy (saying why) until then; the draft lists hold the drafts that fit the target, each
directory once, named unambiguously; the preferred dataset is the target's own bundled eval set."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from backend import defaults
from backend.defaults import REAL, REPO, TOY, active_pair, pair_of
from backend.service import checkpoints, datasets


@pytest.fixture()
def unpinned(monkeypatch):
    """The suite pins the toy (conftest); these tests look at the choice itself."""
    for name in ("SPECLENS_DEMO", "SPECLENS_TARGET", "SPECLENS_DRAFT"):
        monkeypatch.delenv(name, raising=False)


def test_the_real_pair_is_the_default_once_set_up(unpinned, monkeypatch, tmp_path):
    fake = replace(REAL, target=tmp_path / "target", drafts=tmp_path / "drafts")
    monkeypatch.setattr(defaults, "REAL", fake)
    assert not fake.ready()
    chosen = active_pair()
    assert chosen.pair is TOY and "SmolLM2 pair is not set up" in chosen.fallback
    assert "python -m demo.smollm2" in chosen.fallback
    assert defaults.default_target() == str(TOY.target)
    assert defaults.default_draft() == str(TOY.drafts / "final")
    assert defaults.default_eval_set() == str(TOY.eval_set)

    for directory in (fake.target, fake.drafts / "final"):  # set up: config and weights on disk
        directory.mkdir(parents=True)
        (directory / "config.json").write_text("{}")
        (directory / "model.safetensors").write_bytes(b"")
    chosen = active_pair()
    assert chosen.pair is fake and chosen.fallback == ""
    assert defaults.default_target() == str(fake.target)


def test_speclens_demo_and_speclens_target_choose(unpinned, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLENS_DEMO", "toy")
    assert active_pair().pair is TOY and active_pair().fallback == ""
    monkeypatch.setenv("SPECLENS_TARGET", str(REAL.target))  # the real target named: its own drafts
    assert defaults.default_draft() == str(REAL.drafts / "final")
    assert defaults.default_eval_set() == str(REAL.eval_set)


def test_pair_of_reads_the_directory_however_it_is_spelled():
    assert pair_of(REPO / "demo" / "target") is TOY
    assert pair_of(str(REPO / "demo" / ".." / "demo" / "target")) is TOY
    assert pair_of(REPO / "demo" / "smollm2" / "target") is REAL
    assert pair_of("/nowhere") is None and pair_of(None) is None


def test_the_toy_s_drafts_are_listed_for_the_toy_only(tmp_path):
    toy = checkpoints.drafts_for(str(TOY.target), [])
    assert list(toy) == ["epoch1", "final", "miswired"]
    other = tmp_path / "target"
    shutil.copytree(TOY.target, other, ignore=shutil.ignore_patterns("*.safetensors"))
    assert checkpoints.drafts_for(str(other), []) == {}  # not a bundled target: no bundled drafts
    # ...but a draft given by path that fits it is, under its own name
    assert checkpoints.drafts_for(str(other), [str(TOY.drafts / "final")]) == {
        "final": str(TOY.drafts / "final")
    }


def test_a_draft_that_does_not_fit_the_target_is_not_offered_unless_active(tmp_path):
    wide = tmp_path / "wide"
    shutil.copytree(TOY.drafts / "final", wide)
    config = json.loads((wide / "config.json").read_text())
    config["hidden_size"] *= 2  # made for a target twice as wide
    (wide / "config.json").write_text(json.dumps(config))
    assert not checkpoints.fits(str(wide), str(TOY.target))
    assert checkpoints.fits(str(TOY.drafts / "final"), str(TOY.target))
    assert "wide" not in checkpoints.drafts_for(str(TOY.target), [str(wide)])
    assert checkpoints.drafts_for(str(TOY.target), [str(wide)], keep=str(wide))["wide"] == str(wide)


def test_each_directory_is_listed_once_and_a_taken_name_gets_its_folder(tmp_path):
    spelled_otherwise = str(TOY.drafts / ".." / "drafts" / "miswired")  # the bundled one, added by path
    mine = tmp_path / "run2" / "final"
    theirs = tmp_path / "run3" / "final"
    for path in (mine, theirs):
        shutil.copytree(TOY.drafts / "final", path)
    listed = checkpoints.drafts_for(str(TOY.target), [spelled_otherwise, str(mine), str(theirs), str(mine)])
    assert list(listed) == ["epoch1", "final", "miswired", "run2/final", "run3/final"]
    assert listed["miswired"] == str(TOY.drafts / "miswired") and listed["run2/final"] == str(mine)


def test_the_preferred_dataset_is_the_target_s_own_eval_set(db_url):
    datasets.ensure_demo_dataset(db_url)
    registered = {d.path: d.id for d in datasets.list_datasets(db_url)}
    assert datasets.preferred_dataset(db_url, str(TOY.target)) == registered[str(TOY.eval_set)]
    assert datasets.preferred_dataset(db_url, str(REAL.target)) == registered[str(REAL.eval_set)]
    assert datasets.preferred_dataset(db_url, "/somewhere/else") is None


def test_the_cli_on_the_toy_fallback_says_so_once_and_only_on_success(unpinned, monkeypatch, tmp_path):
    """A fresh machine without the SmolLM2 set-up: the command runs on the toy and says so in one line;
    a refused input stays one line."""
    from tests.support.cli import run_cli

    monkeypatch.setenv("SPECLENS_DB_URL", f"sqlite:///{tmp_path}/x.db")
    monkeypatch.setattr(defaults, "REAL", replace(REAL, target=Path("/nowhere")))
    done = run_cli("preflight")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == [
        "note: using the toy demo pair: the SmolLM2 pair is not set up (/nowhere missing: "
        "python -m demo.smollm2 converts it)"
    ]
    refused = run_cli("preflight", "--draft", str(tmp_path / "none"))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
