"""Diagnostics on a context-free (bigram) 8-layer target with drafts that read only the embedding
chunk: the probe, the train-vs-serve diff, run references, the doctor, accuracy vs live, what-if."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from backend.agreement import teacher_vs_live
from backend.checkpoints import load_draft, load_target
from backend.diffs import compare_chunks, first_mismatch, load_feature_file, train_vs_serve
from backend.doctor import compare_mappings, coverage
from backend.jobs import run_replay_job
from backend.probe import run_probe
from backend.replay import ReplayConfig
from backend.run_diffs import compute_reference
from backend.samples import Sample
from backend.synthetic import (
    bigram_draft_tensors,
    corrupt_next_token_map,
    cyclic_next_token_map,
    draft_config_dict,
    make_bigram_target,
    random_draft_tensors,
    save_draft,
)
from backend.teacher import target_pass
from backend.whatif import predict
from backend.wiring import Wiring
from db import store

TRAINED = [0, 2, 4]  # HF indices the drafts below were "trained" on (their fc reads chunk 0 only)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("diagnostics")
    follow = cyclic_next_token_map(48, seed=3)
    model = make_bigram_target(root / "target", follow, num_layers=8, hidden=64, heads=4, kv_heads=2,
                               intermediate=96)
    believed = corrupt_next_token_map(follow, 0.2, seed=4)
    right = draft_config_dict(model.config, aux_ids=[i - 1 for i in TRAINED])  # nested ids declare [0, 2, 4]
    wrong = draft_config_dict(model.config, aux_ids=[1, 3, 4])  # declares the defaults HF [2, 4, 5]
    tensors = bigram_draft_tensors(model, right, believed)
    save_draft(root / "right", right, tensors)
    save_draft(root / "miswired", wrong, tensors)
    target = load_target(root / "target", device="cpu", dtype="fp32")
    generator = torch.Generator().manual_seed(0)
    samples = []
    for number in range(4):
        start = int(torch.randint(48, (1,), generator=generator))
        ids = [start]
        for _ in range(39):
            ids.append(follow[ids[-1]])
        samples.append(Sample(ids, [0] * 8 + [1] * 32, 8, source=f"s{number % 2}"))
    return root, target, samples


def test_probe_names_the_embedding_wiring_of_a_miswired_draft(setup):
    root, target, samples = setup
    draft = load_draft(root / "miswired", target)
    assert list(draft.wiring.aux_hf_indices) == [2, 4, 5]
    report = run_probe(target, draft, draft.wiring, samples, num_steps=3, search_budget=10, live_samples=1,
                       live_tokens=24)
    assert not report.confirmed
    assert report.best.aux_hf_indices[0] == 0 and report.best.acc_step0 > report.declared.acc_step0 + 0.3
    assert "embedding output" in report.verdict and "lost" in report.verdict
    assert report.best.live_accept_length > report.declared.live_accept_length
    as_dict = report.to_dict()
    assert {"declared", "candidates", "best", "verdict"} <= set(as_dict)
    assert as_dict["config"]["vllm"]["eagle_aux_hidden_state_layer_ids"][0] == 0
    assert as_dict["config"]["sglang"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"][0] == -1


def test_probe_confirms_a_correct_declaration(setup):
    root, target, samples = setup
    draft = load_draft(root / "right", target)
    report = run_probe(target, draft, draft.wiring, samples, num_steps=3, search_budget=5)
    assert report.confirmed and report.verdict.startswith("The declared wiring")


def test_cli_probe_contract(setup):
    root, _, samples = setup
    path = root / "samples.jsonl"
    path.write_text("".join(json.dumps({"input_ids": s.input_ids, "loss_mask": s.loss_mask,
                                        "n_prompt_tokens": s.prompt_len}) + "\n" for s in samples))
    done = subprocess.run([sys.executable, "-m", "backend", "probe", "--target", str(root / "target"), "--draft",
                           str(root / "miswired"), "--samples", str(path), "--limit", "3", "--steps", "2",
                           "--budget", "4", "--json"], capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    assert {"declared", "candidates", "best", "verdict"} <= set(out)
    assert out["best"]["aux_hf_indices"][0] == 0 and "acc_step0" in out["candidates"][0]


def test_compare_chunks_metrics():
    fed = torch.tensor([[1.0, 0.0, 2.0, 0.0, 0.0, 3.0]])
    reference = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0, -3.0]])
    rows = compare_chunks(fed, reference, [7], ["a", "b", "c"], "ref")
    a, b, c = rows
    assert a["cosine"] == pytest.approx(1) and a["relative_error"] == 0 and a["norm_ratio"] == 1
    assert b["cosine"] == pytest.approx(1) and b["norm_ratio"] == pytest.approx(2) and b["max_abs_diff"] == 1
    assert c["cosine"] == pytest.approx(-1) and c["relative_error"] == pytest.approx(2)
    assert first_mismatch(rows, ["a", "b", "c"])["chunk"] == "b"  # same cosine, twice the norm


def test_train_vs_serve_finds_the_training_layers(setup, tmp_path):
    _, target, samples = setup
    ids = samples[0].input_ids
    passed = target_pass(target, ids, samples[0].loss_mask, TRAINED)
    path = tmp_path / "data_0.ckpt"
    torch.save({"input_ids": torch.tensor(ids), "loss_mask": torch.tensor(samples[0].loss_mask),
                "hidden_state": torch.zeros(1, len(ids), 64),
                "aux_hidden_state": passed.features(TRAINED)[None].to(torch.bfloat16)}, path)
    features = load_feature_file(path, hidden_size=64)
    served = train_vs_serve(target, features, [2, 4, 5])
    assert served.training_indices == TRAINED
    assert served.first_mismatch["position"] == 0 and served.first_mismatch["chunk"].startswith("chunk0")
    same = train_vs_serve(target, features, TRAINED)
    assert same.first_mismatch is None and all(s["mismatching"] == 0 for s in same.summary)


def test_run_references(setup, tmp_path):
    root, target, samples = setup
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    factory = store.session_factory(store.make_engine(url))
    draft = load_draft(root / "miswired", target)
    run_ids = [run_replay_job(factory, store.artifact_root(url), target, draft, str(root / "miswired"),
                              samples[0].prompt_ids, draft.wiring, ReplayConfig(3, 20)).run_id for _ in range(2)]

    def pair(*_args, **_kwargs):
        return target, draft, draft.wiring

    result = compute_reference(factory, run_ids[0], {"kind": "wiring", "aux_hf_indices": TRAINED}, pair,
                               lambda *_: None)
    with store.session_scope(factory) as session:
        rows = store.get_token_stats(session, run_ids[0], result["reference"])
        assert store.token_stat_references(session, run_ids[0]) == ["wiring HF [0, 2, 4]"]
    chunk0 = [r for r in rows if r["chunk"] == "hf2"]
    assert chunk0 and all(r["cosine"] < 0.99 for r in chunk0)  # HF 2 fed where HF 0 is the reference
    assert {r["position"] for r in rows} >= set(range(8))
    twin = compute_reference(factory, run_ids[0], {"kind": "run", "run_id": run_ids[1]}, pair, lambda *_: None)
    with store.session_scope(factory) as session:
        rows = store.get_token_stats(session, run_ids[0], twin["reference"])
    assert rows and all(r["cosine"] > 0.9999 for r in rows)
    hidden = compute_reference(factory, run_ids[0], {"kind": "target_hidden"}, pair, lambda *_: None)
    assert hidden["rows"] > 0


def test_doctor_coverage_and_regenerated_mapping(setup, tmp_path):
    root, target, samples = setup
    assert coverage(str(root / "right"), 48, samples)["all_tokens"] == 1.0  # no mapping: every token reachable
    config = draft_config_dict(target.model.config, draft_vocab=24)
    save_draft(tmp_path / "a", config, random_draft_tensors(config, seed=1, used_target_ids=list(range(24))))
    save_draft(tmp_path / "b", config, random_draft_tensors(config, seed=1, used_target_ids=list(range(24, 48))))
    save_draft(tmp_path / "c", config, random_draft_tensors(config, seed=2, used_target_ids=list(range(24))))
    cover = coverage(str(tmp_path / "a"), 48, [Sample(list(range(48)), [0] * 24 + [1] * 24, 24)])
    assert cover["all_tokens"] == 0.5 and cover["loss_masked_tokens"] == 0.0
    assert compare_mappings(str(tmp_path / "a"), str(tmp_path / "b"))["regenerated"]
    assert not compare_mappings(str(tmp_path / "a"), str(tmp_path / "c"))["regenerated"]


def test_accuracy_vs_live_flags_the_miswired_draft(setup):
    root, target, samples = setup
    draft = load_draft(root / "miswired", target)
    rows = teacher_vs_live(target, draft, draft.wiring, samples[:2], 3, 24,
                           training_wiring=Wiring(tuple(TRAINED), "claimed training wiring"))
    assert all(r["flagged"] and r["acc_0"] > 0.5 and r["live accept length"] < 1.2 for r in rows)
    right = load_draft(root / "right", target)
    rows = teacher_vs_live(target, right, right.wiring, samples[:2], 3, 24)
    assert not any(r["flagged"] for r in rows)


def test_whatif_reproduces_the_measured_k_and_extrapolates():
    counts = [2, 2, 0, 1]  # K = 2: alpha_1 = 3/4, alpha_2 = 2/3
    rows = {r.num_steps: r for r in predict(counts, 2, draft_ms_total=8.0, verify_ms_total=40.0)}
    assert rows[2].predicted_accept_length == pytest.approx(sum(a + 1 for a in counts) / len(counts))
    assert rows[1].predicted_accept_length == pytest.approx(1.75)
    assert rows[3].extrapolated and rows[3].predicted_accept_length == pytest.approx(2.25 + 0.5 * 2 / 3)
    # draft 1 ms per drafted token, verify 10 ms per step: speed-up(K=2) = 2.25 * 10 / (2 + 10)
    assert rows[2].predicted_speedup == pytest.approx(2.25 * 10 / 12)


def test_cli_gate_min_accept_length(setup, tmp_path):
    root, _, samples = setup
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps({"input_ids": s.input_ids, "loss_mask": s.loss_mask,
                                        "n_prompt_tokens": s.prompt_len}) + "\n" for s in samples[:2]))
    common = ["--target", str(root / "target"), "--draft", str(root / "right"), "--samples", str(path), "--steps", "3"]
    replay = [sys.executable, "-m", "backend", "replay", *common, "--index", "0", "--max-new-tokens", "24",
              "--no-record", "--db", f"sqlite:///{tmp_path / 'gate.db'}", "--json"]
    passed = subprocess.run([*replay, "--min-accept-length", "1.5"], capture_output=True, text=True)
    assert passed.returncode == 0 and "gate passed" in passed.stderr
    failed = subprocess.run([*replay, "--min-accept-length", "9"], capture_output=True, text=True)
    assert failed.returncode == 3 and "gate failed: accept length" in failed.stderr
    assert json.loads(failed.stdout)["mean_accept_length"] < 9  # the JSON is still printed
    teacher = [sys.executable, "-m", "backend", "teacher", *common, "--json"]
    assert subprocess.run([*teacher, "--min-accept-length", "1.2"], capture_output=True).returncode == 0
    low = subprocess.run([*teacher, "--min-accept-length", "9"], capture_output=True, text=True)
    assert low.returncode == 3 and "predicted accept length (1 + simulated)" in low.stderr
