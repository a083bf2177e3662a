"""The CLI contract (`python -m backend`): commands, flags, JSON keys and exit codes. The CLI's `main`
runs in this process (tests/support/cli.py), the models kept loaded between commands; the tests whose
subject is a process (a kill, SIGTERM, what a fresh interpreter imports) spawn one and are marked slow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import REPO, run_cli
from tests.support.datasets import good_record, write_lines
from tests.support.lint import make_draft, make_lint_target, sglang
from tests.support.models import write_samples

ROOT = Path(__file__).resolve().parents[1]


cli = run_cli  # python -m backend ..., in process (tests/support/cli.py)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    import torch

    from tests.support.synthetic import (
        TargetShape,
        draft_config_dict,
        make_target,
        random_draft_tensors,
        save_draft,
    )

    root = tmp_path_factory.mktemp("cli")
    model = make_target(root / "target", TargetShape(num_layers=6, hidden=32, vocab=90))
    drafts = {}
    for layout in ("specforge", "eagle"):
        config = draft_config_dict(
            model.config, draft_vocab=45, layout=layout, aux_ids=[1, 2, 3] if layout == "specforge" else None
        )
        drafts[layout] = save_draft(
            root / layout,
            config,
            random_draft_tensors(config),
            layout,
            dtype=torch.bfloat16 if layout == "specforge" else torch.float16,
        )
    samples = root / "train.jsonl"
    samples.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {
                    "input_ids": [5, 6, 7, 8, 9, 10],
                    "loss_mask": [0, 0, 0, 1, 1, 1],
                    "seq_len": 6,
                    "n_prompt_tokens": 3,
                    "n_response_tokens": 3,
                    "source": "unit",
                },
                {
                    "input_ids": [11, 12, 13, 14, 15, 16, 17, 18],
                    "loss_mask": [0, 0, 1, 1, 1, 1, 1, 1],
                    "seq_len": 8,
                    "n_prompt_tokens": 2,
                    "n_response_tokens": 6,
                    "source": "unit",
                },
            ]
        )
        + "\nnot json\n"
    )
    return root, drafts, samples


def test_preflight_json(checkpoints):
    root, drafts, _ = checkpoints
    result = cli("preflight", "--target", str(root / "target"), "--draft", str(drafts["specforge"]), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["aux_hf_indices"] == [2, 3, 4]
    assert {"name", "status", "message"} <= set(report["checks"][0])
    assert set(report["engines"]) == {
        "sglang",
        "vllm",
        "vllm-v2",
        "llamacpp",
        "specforge",
        "speculators",
        "eagle",
    }
    assert report["engines"]["sglang"]["aux_hf_indices"] == [2, 3, 4] and isinstance(
        report["disagreements"], list
    )


@pytest.mark.parametrize("layout", ["specforge", "eagle"])
def test_replay_json_from_samples(checkpoints, tmp_path, layout):
    root, drafts, samples = checkpoints
    db_url = f"sqlite:///{tmp_path / 'cli.db'}"
    result = cli(
        "replay",
        "--target",
        str(root / "target"),
        "--draft",
        str(drafts[layout]),
        "--samples",
        str(samples),
        "--index",
        "1",
        "--steps",
        "3",
        "--max-new-tokens",
        "20",
        "--db",
        db_url,
        "--json",
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    for key in (
        "run_id",
        "output_ids",
        "steps",
        "mean_accept_length",
        "accepted_per_step",
        "per_position_marginal",
        "per_position_conditional",
        "aux_hf_indices",
    ):
        assert key in payload
    assert payload["aux_hf_indices"] == ([2, 3, 4] if layout == "specforge" else [2, 3, 3])
    assert {"drafted", "accepted", "bonus"} <= set(payload["steps"][0])  # extended with "tree", never renamed
    assert payload["steps"][0]["tree"]["tokens"] == payload["steps"][0]["drafted"]  # a chain is a path
    from backend.engine.loading import load_target
    from tests.support.oracle import plain_greedy

    target = load_target(root / "target", device="cpu")
    # the prompt is the sample's first n_prompt_tokens ids, used as they are
    assert payload["output_ids"] == plain_greedy(target, [11, 12], 20)
    assert len(payload["per_position_marginal"]) == 3
    assert payload["mean_accept_length"] == pytest.approx(
        1 + sum(payload["accepted_per_step"]) / len(payload["accepted_per_step"])
    )
    assert (tmp_path / "cli.db").exists() and (tmp_path / "artifacts" / str(payload["run_id"])).is_dir()


def test_replay_prompt_text_and_override(checkpoints, tmp_path):
    root, drafts, _ = checkpoints
    result = cli(
        "replay",
        "--target",
        str(root / "target"),
        "--draft",
        str(drafts["specforge"]),
        "--prompt",
        "Hello",
        "--steps",
        "2",
        "--max-new-tokens",
        "8",
        "--aux-hf-indices",
        "0,3,6",
        "--db",
        f"sqlite:///{tmp_path / 'p.db'}",
        "--json",
        "--no-record",
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["aux_hf_indices"] == [0, 3, 6] and len(payload["output_ids"]) == 8


def test_replay_tree_and_sampling_flags(checkpoints, tmp_path):
    """A tree replay equals the target's greedy output and reports each step's tree; SGLang's
    rewrite of topk-1 draft tokens is applied, stored and warned; a sampled run replays bit for bit
    from its seed; vLLM refuses trees with exit 2 before any model loads."""
    import torch

    from backend.engine.loading import load_target
    from backend.run.records import StepTree
    from tests.support.oracle import plain_greedy

    root, drafts, samples = checkpoints
    base = ["replay", "--target", str(root / "target"), "--draft", str(drafts["specforge"])]
    base += [
        "--samples",
        str(samples),
        "--max-new-tokens",
        "12",
        "--db",
        f"sqlite:///{tmp_path / 't.db'}",
        "--json",
    ]
    tree = cli(*base, "--steps", "3", "--topk", "4", "--num-draft-tokens", "8")
    assert tree.returncode == 0, tree.stderr
    payload = json.loads(tree.stdout)
    assert (payload["topk"], payload["num_draft_tokens"], payload["mode"]) == (4, 8, "tree k=4 N=8 greedy")
    with torch.inference_mode():
        target = load_target(root / "target")
    assert payload["output_ids"] == plain_greedy(target, [5, 6, 7], 12)
    for step in payload["steps"]:
        nodes = step["tree"]
        assert StepTree.from_dict(nodes).to_dict() == nodes  # the stored and printed tree reads back typed
        assert len(nodes["tokens"]) == 7 and len(nodes["parents"]) == 7 and len(nodes["scores"]) == 7
        assert all(-1 <= p < i for i, p in enumerate(nodes["parents"]))
        assert step["accepted"] == len(nodes["accepted_path"])

    chain = cli(*base, "--steps", "5", "--topk", "1", "--num-draft-tokens", "16", "--no-record")
    assert chain.returncode == 0, chain.stderr
    payload = json.loads(chain.stdout)
    assert payload["num_draft_tokens"] == 6 and payload["requested"]["num_draft_tokens"] == 16
    assert "rewrites num_draft_tokens 16 -> 6" in chain.stderr

    sampled = [*base, "--steps", "3", "--topk", "2", "--num-draft-tokens", "5", "--temperature", "0.8"]
    first, again = cli(*sampled, "--seed", "7"), cli(*sampled, "--seed", "7")
    assert first.returncode == 0, first.stderr
    one, two = json.loads(first.stdout), json.loads(again.stdout)
    assert one["output_ids"] == two["output_ids"] and one["steps"] == two["steps"]
    assert one["sampling"] == {
        "temperature": 0.8,
        "top_p": 1.0,
        "top_k": 0,
        "seed": 7,
        "sampling_rule": "sglang",
    }
    assert one["expected_accept_length"] is not None

    refused = cli(*base, "--steps", "3", "--topk", "4", "--num-draft-tokens", "8", "--engine", "vllm")
    assert refused.returncode == 2 and "vLLM verifies chains only" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_teacher_json(checkpoints):
    root, drafts, samples = checkpoints
    result = cli(
        "teacher",
        "--target",
        str(root / "target"),
        "--draft",
        str(drafts["specforge"]),
        "--samples",
        str(samples),
        "--steps",
        "3",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert len(payload["acc_per_step"]) == 3 and payload["n_positions"] == 2 + 5  # loss_mask[t] for t < T-1
    assert payload["rejected"] == [{"line": 3, "reason": payload["rejected"][0]["reason"]}]
    assert "simulated_accept_length" in payload


@pytest.mark.parametrize(
    "args, reason",
    [
        (
            ["replay", "--target", "/nonexistent", "--draft", "/nonexistent", "--prompt", "x"],
            "not a local Hugging Face",
        ),
        (
            [
                "replay",
                "--target",
                "{target}",
                "--draft",
                "{draft}",
                "--samples",
                "{samples}",
                "--index",
                "7",
            ],
            "out of range",
        ),
        (
            [
                "replay",
                "--target",
                "{target}",
                "--draft",
                "{draft}",
                "--prompt",
                "x",
                "--aux-hf-indices",
                "0,1,99",
            ],
            "out of range",
        ),
        (
            ["replay", "--target", "{target}", "--draft", "{draft}", "--prompt", "x", "--steps", "0"],
            "must be in 1..64, got 0",
        ),
        # issue 58 row 6: a budget that would run for hours, and one past the target's context (2048)
        (["replay", "--prompt", "x", "--max-new-tokens", "100000000"], "must be in 1..32768"),
        (
            [
                "replay",
                "--target",
                "demo/target",
                "--draft",
                "demo/drafts/final",
                "--prompt",
                "x",
                "--max-new-tokens",
                "3000",
            ],
            "exceeds the target's context (max_position_embeddings 2048); ask for at most",
        ),
        (
            ["teacher", "--target", "{target}", "--draft", "{draft}", "--samples", "/nope.jsonl"],
            "no such file",
        ),
        (["teacher", "--draft", "{draft}", "--samples", "{samples}", "--steps", "1000"], "must be in 1..64"),
        (["replay", "--prompt", "x", "--min-accept-length", "nan"], "not a finite number"),
        (["replay", "--prompt", "abc\udcff"], "--prompt: not UTF-8 text"),
        (
            ["replay", "--target", "{target}", "--draft", "{draft}", "--prompt", "x", "--device", "bogus"],
            "not a device",
        ),
        (["serve-check", "--url", "garbage", "--samples", "{samples}"], "expected http://HOST:PORT"),
        (
            [
                "export",
                "--db",
                "mysql://u:p@127.0.0.1:9/x",
                "--run",
                "1",
                "--format",
                "csv",
                "--out",
                "x.csv",
            ],
            "driver is not installed",
        ),
        (
            [
                "lint",
                "--draft",
                "{draft}",
                "--sglang",
                "x --speculative-algorithm EAGLE3 --speculative-num-steps -4",
            ],
            "must be a positive integer",
        ),
        (
            [
                "lint",
                "--draft",
                "{draft}",
                "--target",
                "/nonexistent",
                "--sglang",
                "x --speculative-algorithm EAGLE3",
            ],
            "no config.json",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(checkpoints, args, reason):
    root, drafts, samples = checkpoints
    args = [a.format(target=root / "target", draft=drafts["specforge"], samples=samples) for a in args]
    result = cli(*args, "--json")
    assert result.returncode == 2, result.stderr
    progress = ("%|", "Loading weights")  # tqdm bars (the target loads before some checks can run)
    lines = [
        line for line in result.stderr.splitlines() if line.strip() and not any(p in line for p in progress)
    ]
    assert len(lines) == 1 and reason in lines[0], result.stderr  # progress bars aside: one line
    assert result.stdout == ""


def test_failing_preflight_exits_2_but_prints_the_report(checkpoints, tmp_path):
    root, drafts, _ = checkpoints
    broken = tmp_path / "broken"
    broken.mkdir()
    config = json.loads((drafts["specforge"] / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps(config))
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(drafts["specforge"] / "model.safetensors"))
    del tensors["d2t"]
    save_file(tensors, str(broken / "model.safetensors"))
    result = cli("preflight", "--target", str(root / "target"), "--draft", str(broken), "--json")
    assert result.returncode == 2 and json.loads(result.stdout)["ok"] is False
    replay = cli(
        "replay", "--target", str(root / "target"), "--draft", str(broken), "--prompt", "x", "--json"
    )
    assert replay.returncode == 2 and "failed preflight" in replay.stderr and "no d2t" in replay.stderr


def test_cli_import_contract(tmp_path):
    from db import store

    path = write_lines(tmp_path / "mixed.jsonl", [json.dumps(good_record()).encode(), b"{oops"])
    url = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    done = cli(
        "import",
        "--samples",
        str(path),
        "--name",
        "mine",
        "--db",
        url,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    unreadable = cli("import", "--samples", str(path), "--target", str(tmp_path / "none"), "--db", url)
    assert unreadable.returncode == 2 and unreadable.stderr.count("\n") == 1 and "none" in unreadable.stderr
    out = json.loads(done.stdout)
    assert (
        out["imported"] == 1
        and out["rejected"][0]["line"] == 2
        and "invalid JSON" in out["rejected"][0]["reason"]
    )
    with store.session_scope(store.session_factory(store.make_engine(url))) as session:
        names = [d.name for d in store.list_datasets(session)]
    assert names[-1] == "mine" and out["dataset_id"] == len(names)
    bad = write_lines(tmp_path / "bad.jsonl", [b"{oops"])
    failed = cli("import", "--samples", str(bad), "--db", url)
    assert failed.returncode == 2 and "no valid record" in failed.stderr


def test_cli_export(stored_run, tmp_path):
    url, run_id = stored_run
    out = tmp_path / "run.json"
    done = cli("export", "--run", str(run_id), "--format", "json", "--out", str(out), "--db", url, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["out"] == str(out) and json.loads(out.read_text())["id"] == run_id
    missing = cli("export", "--run", "999", "--format", "csv", "--out", str(tmp_path / "x.csv"), "--db", url)
    assert missing.returncode == 2 and "no run 999" in missing.stderr


def test_cli_lint_json(tmp_path):
    target_dir = make_lint_target(tmp_path / "target")
    good = make_draft(tmp_path, "good", aux_ids=[1, 15, 28])
    command = sglang(
        good, "--speculative-num-steps 1 --speculative-eagle-topk 1", "--speculative-num-draft-tokens 16"
    ).replace("EAGLE3", "EAGLE")
    done = cli("lint", "--target", str(target_dir), "--sglang", command, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"severity", "code", "message", "fix"} <= set(report["findings"][0])
    assert {"topk1-draft-tokens-reset", "eagle-algorithm-eagle3-draft"} <= {
        f["code"] for f in report["findings"]
    }
    assert "--speculative-algorithm EAGLE3" in report["recommended_command"]
    text = cli("lint", "--target", str(target_dir), "--sglang", command)
    assert f"  {report['recommended_command']}\n" in text.stdout  # the one line to copy
    bad = cli("lint", "--draft", str(good), "--sglang", "python -m sglang.launch_server")
    assert bad.returncode == 2 and bad.stderr.startswith("error:")


def test_cli_probe_contract(bigram_setup, tmp_path):
    path = write_samples(tmp_path / "samples.jsonl", bigram_setup.samples)
    done = cli(
        "probe",
        "--target",
        str(bigram_setup.target_dir),
        "--draft",
        str(bigram_setup.root / "miswired"),
        "--samples",
        str(path),
        "--limit",
        "3",
        "--steps",
        "2",
        "--budget",
        "4",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert {"declared", "candidates", "best", "verdict"} <= set(out)
    assert out["best"]["aux_hf_indices"][0] == 0 and "acc_step0" in out["candidates"][0]


def test_cli_gate_min_accept_length(bigram_setup, tmp_path):
    path = write_samples(tmp_path / "samples.jsonl", bigram_setup.samples[:2])
    common = [
        "--target",
        str(bigram_setup.target_dir),
        "--draft",
        str(bigram_setup.root / "right"),
        "--samples",
        str(path),
        "--steps",
        "3",
    ]
    replay = [
        "replay",
        *common,
        "--index",
        "0",
        "--max-new-tokens",
        "24",
        "--no-record",
        "--db",
        f"sqlite:///{tmp_path / 'gate.db'}",
        "--json",
    ]
    passed = cli(*replay, "--min-accept-length", "1.5")
    assert passed.returncode == 0 and "gate passed" in passed.stderr
    failed = cli(*replay, "--min-accept-length", "9")
    assert failed.returncode == 3 and "gate failed: accept length" in failed.stderr
    assert json.loads(failed.stdout)["mean_accept_length"] < 9  # the JSON is still printed
    teacher = ["teacher", *common, "--json"]
    assert cli(*teacher, "--min-accept-length", "1.2").returncode == 0
    low = cli(*teacher, "--min-accept-length", "9")
    assert low.returncode == 3 and "predicted accept length (1 + simulated)" in low.stderr


def test_cli_observe_json_and_bad_logs(tmp_path):
    examples = ROOT / "tests" / "support" / "serving"
    db = f"sqlite:///{tmp_path / 'o.db'}"
    result = cli("observe", "--sglang-log", str(examples / "sglang_0.5.12.log"), "--db", db, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {"observation_id", "engine", "accept_length", "per_position", "settings", "lint"} <= set(report)
    assert report["engine"] == "sglang" and report["settings"]["speculative_num_draft_tokens"] == 2
    metrics = cli(
        "observe", "--vllm-metrics", str(examples / "vllm_0.11.0_metrics.txt"), "--db", db, "--json"
    )
    assert json.loads(metrics.stdout)["per_position"] == [0.9]
    garbage = tmp_path / "garbage.log"
    garbage.write_text("nothing to see\n")
    bad = cli("observe", "--sglang-log", str(garbage), "--db", db)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "garbage.log" in bad.stderr


def _long_replay(db_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backend",
            "replay",
            "--samples",
            "demo/data/eval.jsonl",
            "--index",
            "0",
            "--steps",
            "4",
            "--max-new-tokens",
            "1900",  # the toy target's context is 2048
            "--db",
            f"sqlite:///{db_path}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_steps(db_path: Path, wanted: int) -> int:
    import sqlite3
    import time

    steps, deadline = 0, time.time() + 120
    while time.time() < deadline and steps < wanted:
        time.sleep(0.2)
        if db_path.exists():
            try:
                with sqlite3.connect(db_path) as connection:
                    steps = connection.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
            except sqlite3.OperationalError:
                steps = 0
    return steps


@pytest.mark.slow
def test_a_killed_or_terminated_replay_process_keeps_every_committed_step(tmp_path):
    """A replay process stopped from outside, both ways (each a real `python -m backend` process)."""
    (tmp_path / "killed").mkdir()
    (tmp_path / "terminated").mkdir()
    _sigkill_keeps_every_committed_step(tmp_path / "killed")
    _sigterm_ends_a_replay_as_interrupted_with_its_artifact(tmp_path / "terminated")


def _sigkill_keeps_every_committed_step(tmp_path):
    """SIGKILL mid-run: the batched writer's commits stay, as a whole prefix of steps that replays
    the target's greedy text (nothing half-written); the next open marks the run interrupted, with
    its partial output, instead of leaving it running forever."""
    import os
    import signal
    import sqlite3

    from backend.service.runs import get_run, list_runs

    db_path = tmp_path / "killed.db"
    process = _long_replay(db_path)
    steps = _wait_for_steps(db_path, 40)
    # one more commit: the part file of the commit seen is written before the writer commits again (a
    # kill between a commit and its part, under load the first commit's, would leave no part to merge)
    steps = _wait_for_steps(db_path, steps + 1)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert steps >= 40, "the replay never committed 40 steps"
    (run,) = list_runs(f"sqlite:///{db_path}")
    assert run.status == "interrupted" and "is gone" in run.error and run.finished_at is not None
    assert len(run.output_ids) >= 40 and get_run(f"sqlite:///{db_path}", run.id).step_count >= 40
    # the hidden states written with each commit were merged when the run was reaped
    from db.artifacts import read_artifact

    assert run.artifact_path and Path(run.artifact_path).is_file()
    tensors = read_artifact(run.artifact_path, run.artifact_sha256)
    stored_positions = tensors["aux_positions"].tolist()
    assert stored_positions == sorted(set(stored_positions)) and len(tensors["draft_hidden"]) >= 30
    assert tensors["aux_features"].shape[0] == len(stored_positions) and "prompt_aux_features" in tensors
    with sqlite3.connect(db_path) as connection:
        rows = connection.execute(
            "SELECT step_index, position, committed_ids FROM steps ORDER BY step_index"
        ).fetchall()
        prompt = json.loads(connection.execute("SELECT prompt_ids FROM runs").fetchone()[0])
    assert [r[0] for r in rows] == list(range(len(rows)))  # a whole prefix of steps
    position = rows[0][1]
    output = []
    for _, step_position, committed in rows:
        assert step_position == position  # each step starts where the previous one's tokens ended
        position += len(json.loads(committed))
        output += json.loads(committed)
    from backend.defaults import DEMO_TARGET
    from backend.engine.loading import load_target
    from tests.support.oracle import plain_greedy

    target = load_target(DEMO_TARGET, device="cpu", dtype="fp32")
    assert plain_greedy(target, prompt, 1 + len(output))[1:] == output


def _sigterm_ends_a_replay_as_interrupted_with_its_artifact(tmp_path):
    import os
    import signal

    from backend.service.runs import get_run_with_steps, list_runs

    db_path = tmp_path / "terminated.db"
    process = _long_replay(db_path)
    assert _wait_for_steps(db_path, 20) >= 20
    os.kill(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143 and "interrupted (SIGTERM)" in stderr and "Traceback" not in stderr
    (run,) = list_runs(f"sqlite:///{db_path}")
    assert run.status == "interrupted" and run.artifact_path and Path(run.artifact_path).is_file()
    _, steps = get_run_with_steps(f"sqlite:///{db_path}", run.id)
    assert len(run.output_ids) == 1 + sum(len(s.committed_ids) for s in steps)


def test_export_never_overwrites_the_database(tmp_path, checkpoints):
    root, drafts, samples = checkpoints
    db = f"sqlite:///{tmp_path / 'keep.db'}"
    made = cli(
        "replay",
        "--target",
        str(root / "target"),
        "--draft",
        str(drafts["specforge"]),
        "--samples",
        str(samples),
        "--max-new-tokens",
        "4",
        "--db",
        db,
        "--json",
        "--no-record",
    )
    assert made.returncode == 0, made.stderr
    run_id = str(json.loads(made.stdout)["run_id"])
    for out in (
        tmp_path / "keep.db",
        tmp_path / "keep.db-wal",
        tmp_path,
        tmp_path / "sub" / ".." / "keep.db",
    ):
        refused = cli("export", "--run", run_id, "--format", "csv", "--out", str(out), "--db", db)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    listed = cli(
        "export", "--run", run_id, "--format", "json", "--out", str(tmp_path / "run.json"), "--db", db
    )
    assert listed.returncode == 0 and json.loads((tmp_path / "run.json").read_text())["id"] == int(run_id)


def test_a_corrupt_or_newer_database_is_one_line_and_exit_2(tmp_path):
    import sqlite3

    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database" * 100)
    result = cli(
        "export",
        "--run",
        "1",
        "--format",
        "csv",
        "--out",
        str(tmp_path / "x.csv"),
        "--db",
        f"sqlite:///{corrupt}",
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "corrupt.db" in result.stderr
    newer = tmp_path / "newer.db"
    from db.store import make_engine

    make_engine(f"sqlite:///{newer}").dispose()
    with sqlite3.connect(newer) as connection:
        connection.execute("UPDATE speclens_schema SET version = 99")
    result = cli(
        "export",
        "--run",
        "1",
        "--format",
        "csv",
        "--out",
        str(tmp_path / "x.csv"),
        "--db",
        f"sqlite:///{newer}",
    )
    assert result.returncode == 2 and "schema version 99, newer than this SpecLens" in result.stderr


def test_a_bad_draft_or_sample_file_is_reported_before_the_target_loads(checkpoints, tmp_path):
    root, _, _ = checkpoints
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for extra, reason in (
        (["--draft", str(tmp_path / "missing"), "--prompt", "x"], "missing: no such directory"),
        (["--samples", str(empty), "--index", "0"], "no valid sample (the file has no records)"),
        (["--prompt", "x", "--aux-hf-indices", "0,1,99"], "aux HF indices [99] out of range"),
    ):
        result = cli("replay", "--target", str(root / "target"), *extra)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr  # no loading bars
        assert reason in result.stderr


def test_a_bad_samples_path_is_refused_before_the_model_stack_loads(tmp_path):
    """Issue 44: `import --samples /dev/zero` was refused only after the target's tokenizer (torch,
    transformers: 10 s on a busy box) had loaded. The path is checked first: exit 2, one line, and
    neither torch nor transformers imported by the command. One fresh interpreter runs the four cases
    (import and evaluate, a device and a missing file), each command's stderr captured on its own."""
    import subprocess
    import sys

    cases = [
        (command, bad) for command in ("import", "evaluate") for bad in ("/dev/zero", "no/such/file.jsonl")
    ]
    script = (
        "import contextlib, io, json, sys\n"
        "from backend.cli import main\n"
        "done = []\n"
        f"for command, bad in {cases!r}:\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        f"        code = main([command, '--samples', bad, '--db', {f'sqlite:///{tmp_path}/s.db'!r}])\n"
        "    done.append([code, err.getvalue()])\n"
        "print(json.dumps(done))\n"
        "print('HEAVY', sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    results = json.loads(ran.stdout.splitlines()[0])
    for (command, bad), (code, stderr) in zip(cases, results, strict=True):
        assert code == 2 and stderr.count("\n") == 1 and bad in stderr, (command, bad, stderr)
    assert "HEAVY []" in ran.stdout
