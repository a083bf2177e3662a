"""The bundled demo: committed files load offline, and its headline numbers hold (loose bounds).
The file checks are fast; the tests that replay and probe the pair on CPU are slow, and share one
loaded target (one file: one xdist worker)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from backend.data.samples import read_jsonl
from backend.defaults import DEMO, DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
from backend.engine.wiring import default_hf_indices
from tests.support.demo import demo_wiring

K = 4


@pytest.fixture(scope="module")
def target():
    from backend.engine.loading import load_target

    return load_target(DEMO_TARGET, device="cpu", dtype="fp32")


@pytest.fixture(scope="module")
def evaluation(target):
    samples, rejected = read_jsonl(DEMO_EVAL, target.vocab_size)
    assert not rejected
    return samples


def load_draft(target, name, wiring=None):
    """(draft, the wiring it is fed): the declared one, or `wiring` (HF indices) when given."""
    from tests.support.models import load_draft as load

    return load(DEMO_DRAFTS / name, target, wiring)


def test_committed_files_load_offline():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.engine.preflight import preflight

    model = AutoModelForCausalLM.from_pretrained(DEMO_TARGET, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TARGET, local_files_only=True)
    layers = model.config.num_hidden_layers
    assert layers >= 6 and len(set(default_hf_indices(layers))) == 3
    assert tokenizer.chat_template and tokenizer.eos_token_id == model.generation_config.eos_token_id
    for name in ("final", "epoch1", "miswired"):
        config = json.loads((DEMO_DRAFTS / name / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLMEagle3"]
        assert config["draft_vocab_size"] < config["vocab_size"]
        assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [
            i - 1 for i in default_hf_indices(layers)
        ]
        assert preflight(DEMO_DRAFTS / name, DEMO_TARGET).ok
    trained = json.loads((DEMO_DRAFTS / "miswired" / "TRAINED_WIRING.json").read_text())["aux_hf_indices"]
    assert trained[0] == 0 and trained != default_hf_indices(layers)
    for name in ("train.jsonl", "eval.jsonl"):
        samples, rejected = read_jsonl(DEMO / "data" / name, model.config.vocab_size)
        assert samples and not rejected and len({s.source for s in samples}) >= 4
        assert all(
            s.loss_mask[: s.prompt_len] == [0] * s.prompt_len and all(s.loss_mask[s.prompt_len :])
            for s in samples
        )
    conversations = json.loads((DEMO / "data" / "sharegpt.json").read_text())
    assert conversations and all(c["conversations"][0]["from"] == "human" for c in conversations)
    continuations = [json.loads(line) for line in (DEMO / "data" / "eval_continuations.jsonl").open()]
    assert [c["index"] for c in continuations[:16]] == list(range(16))
    assert all(len(c["ids"]) == 96 for c in continuations)
    files = sorted((DEMO / "data" / "features").glob("*.ckpt"))
    assert files
    data = torch.load(files[0], weights_only=True)
    assert data["aux_hidden_state"].shape[-1] == 3 * model.config.hidden_size
    assert data["hidden_state"].shape[1] == len(data["input_ids"])


def test_the_serving_log_reads_as_the_seed_story():
    """The constructed SGLang log: the draft-token reset notice, the effective settings after it,
    and the mis-wired draft's replayed accept lengths."""
    from backend.data.serving import parse_sglang_log

    path = DEMO / "data" / "serving" / "sglang_seed.log"
    seen = parse_sglang_log(path.read_text(), str(path))
    assert seen.rewrites and "adjusted" in seen.rewrites[0]
    assert seen.settings["speculative_draft_model_path"] == "demo/drafts/miswired"
    steps = seen.settings["speculative_num_steps"]
    assert (
        seen.settings["speculative_eagle_topk"] == 1
        and seen.settings["speculative_num_draft_tokens"] == steps + 1
    )
    assert seen.samples >= 16 and 1.0 <= seen.accept_length <= steps + 1


# What a build writes and git ignores (.gitignore): intermediate files, the converted SmolLM2 target and
# its drafts' unpacked weights (git holds them xz-packed, demo/packed.py).
UNTRACKED = (DEMO / ".build", DEMO / "smollm2" / ".build", DEMO / "smollm2" / "target")


def untracked(f: Path) -> bool:
    unpacked = f.parent.parent == DEMO / "smollm2" / "drafts" and f.name == "model.safetensors"
    return unpacked or any(f.is_relative_to(u) for u in UNTRACKED)


def demo_files() -> list[Path]:
    """The demo's committed files: git's list in a checkout; in a copy without .git (a `git archive`
    export) every file but the ignored build outputs."""
    if (DEMO.parent / ".git").exists():
        listed = subprocess.run(["git", "ls-files", "demo"], cwd=DEMO.parent, capture_output=True, text=True)
        return [DEMO.parent / f for f in listed.stdout.split()]
    return [f for f in DEMO.rglob("*") if f.is_file() and "__pycache__" not in f.parts and not untracked(f)]


def test_demo_fits_in_60_megabytes():
    files = demo_files()
    total = sum(f.stat().st_size for f in files if f.is_file())
    assert files and total <= 60 * 2**20, f"demo/ is {total / 2**20:.1f} MB committed"


def teacher(target, name, samples, wiring=None):
    from backend.engine.teacher import TeacherCounts, teacher_forced_counts

    draft, fed = load_draft(target, name, wiring)
    totals = TeacherCounts([0] * K, [0] * K)
    for sample in samples:
        totals.add(teacher_forced_counts(target, draft, fed, sample.input_ids, sample.loss_mask, K))
    return totals.acc_per_step


def live(target, name, samples, wiring=None, tokens=96):
    from backend.engine.replay import ReplayConfig, StepRecord, output_ids_of, replay

    draft, fed = load_draft(target, name, wiring)
    accepted, outputs = [], []
    for sample in samples:
        records = list(replay(target, draft, sample.prompt_ids, fed, ReplayConfig(K, tokens, record=False)))
        accepted += [r.accepted_count + 1 for r in records if isinstance(r, StepRecord)]
        outputs.append(output_ids_of(records))
    return sum(accepted) / len(accepted), outputs


@pytest.mark.slow
def test_headline_numbers(target, evaluation):
    from tests.support.oracle import plain_greedy

    samples = evaluation[:12]
    final_acc, epoch1_acc = teacher(target, "final", samples), teacher(target, "epoch1", samples)
    assert final_acc[0] >= 0.55 and epoch1_acc[0] < final_acc[0]
    prompts = evaluation[:3]
    final_al, outputs = live(target, "final", prompts)
    epoch1_al, _ = live(target, "epoch1", prompts)
    assert final_al >= 2.3 and epoch1_al < final_al
    for sample, output in zip(prompts, outputs, strict=True):
        assert output == plain_greedy(target, sample.prompt_ids, len(output))  # exactness on the demo pair
    trained, _ = demo_wiring()
    true_al, _ = live(target, "miswired", prompts, wiring=trained)
    declared_al, _ = live(target, "miswired", prompts)
    assert true_al >= 2.3 and declared_al <= 0.75 * true_al


@pytest.mark.slow
def test_probe_ranks_the_demo_drafts(target, evaluation):
    from backend.diagnostics.probe import ProbeSettings, run_probe

    trained, _ = demo_wiring()
    miswired, declared = load_draft(target, "miswired")
    report = run_probe(target, miswired, declared, evaluation[:6], ProbeSettings(K, 20))
    named = [list(c.aux_hf_indices) for c in [report.best, *report.as_good]]
    assert not report.confirmed and trained in named  # HF 1 and 2 of this target are near twins
    assert report.best.acc_step0 > report.declared.acc_step0 + 0.1
    assert "embedding output" in report.verdict and "% lost" in report.verdict
    final, declared = load_draft(target, "final")
    confirmed = run_probe(target, final, declared, evaluation[:6], ProbeSettings(K, 20))
    assert confirmed.confirmed and confirmed.verdict.startswith("The declared wiring")


@pytest.mark.slow
def test_trees_on_the_demo_pair(target, evaluation):
    """Every tree shape replays exactly the target's greedy output (first eval prompt, 48 new tokens),
    and SGLang's (3, 4, 8) tree accepts at least as much as the chain at K = 3 over the first 3 eval
    prompts (96 new tokens; demo/MEASURED.md has the 16-prompt table)."""
    from backend.engine.records import StepRecord
    from backend.engine.replay import ReplayConfig, output_ids_of, replay
    from tests.support.oracle import plain_greedy

    draft, fed = load_draft(target, "final")

    def accept_length(shape, samples, tokens):
        steps, topk, draft_tokens = shape
        config = ReplayConfig(steps, tokens, record=False, topk=topk, num_draft_tokens=draft_tokens)
        counts, outputs = [], []
        for sample in samples:
            records = list(replay(target, draft, sample.prompt_ids, fed, config))
            counts += [len(r.committed_ids) for r in records if isinstance(r, StepRecord)]
            outputs.append(output_ids_of(records))
        return sum(counts) / len(counts), outputs

    for shape in [(3, 1, 4), (3, 4, 8), (5, 8, 32), (2, 2, 3)]:
        _, outputs = accept_length(shape, evaluation[:1], 48)
        for sample, output in zip(evaluation[:1], outputs, strict=True):
            assert output == plain_greedy(target, sample.prompt_ids, 48), shape
    chain, _ = accept_length((3, 1, 4), evaluation[:3], 96)
    tree, _ = accept_length((3, 4, 8), evaluation[:3], 96)
    assert tree >= chain, (tree, chain)
