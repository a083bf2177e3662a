"""The wiring probe on a context-free (bigram) 8-layer target with drafts that read only the
embedding chunk: it names the trained wiring of a mis-wired draft and confirms a correct one."""

from __future__ import annotations


def test_probe_names_the_embedding_wiring_of_a_miswired_draft(bigram_setup):
    from backend.diagnostics.probe import ProbeSettings, run_probe
    from tests.support.models import load_draft

    setup = bigram_setup
    draft, wiring = load_draft(setup.root / "miswired", setup.target)
    assert list(wiring.aux_hf_indices) == [2, 4, 5]
    reports = []
    report = run_probe(
        setup.target,
        draft,
        wiring,
        setup.samples,
        ProbeSettings(num_steps=3, search_budget=10, live_samples=1, live_tokens=24),
        progress=lambda fraction, message: reports.append((fraction, message)),
    )
    assert not report.confirmed
    assert report.best.aux_hf_indices[0] == 0 and report.best.acc_step0 > report.declared.acc_step0 + 0.3
    assert "embedding output" in report.verdict and "lost" in report.verdict
    assert report.best.live_accept_length > report.declared.live_accept_length
    as_dict = report.to_dict()
    assert {"declared", "candidates", "best", "verdict"} <= set(as_dict)
    if as_dict["separated"]:  # the config to paste writes the one wiring the probe separated
        assert as_dict["config"]["vllm"]["eagle_aux_hidden_state_layer_ids"][0] == 0
        assert as_dict["config"]["sglang"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"][0] == -1
    else:  # tied wirings: nothing to paste, and how to separate them
        assert as_dict["config"] is None and len(as_dict["tied"]) > 1
        # the draft reads only the embedding chunk: every [0, a, b] scores the same, and it says so
        assert all(w[0] == 0 for w in as_dict["tied"]) and "score the same" in as_dict["how_to_separate"]
    # progress: (fraction, message), fractions within 0..1 and ending done
    assert reports and all(0.0 <= f <= 1.0 and isinstance(m, str) for f, m in reports)
    assert reports[-1] == (1.0, "done")


def test_the_live_replays_over_traces_give_every_candidate_its_exact_accept_length(bigram_setup):
    """--via trace: the target once per sample (every layer), then every candidate replayed over it by the
    draft alone; the live accept lengths the step replays measure for the best, declared and runner-up
    are the same numbers (fp32)."""
    from backend.diagnostics.probe import ProbeSettings, run_probe
    from tests.support.models import load_draft

    setup = bigram_setup
    draft, wiring = load_draft(setup.root / "miswired", setup.target)
    step, trace = (
        run_probe(
            setup.target,
            draft,
            wiring,
            setup.samples,
            ProbeSettings(3, 10, live_samples=2, live_tokens=24, via=via),
        )
        for via in ("step", "trace")
    )
    assert all(c.live_accept_length is not None for c in trace.candidates) and len(trace.candidates) > 3
    assert sum(c.live_accept_length is not None for c in step.candidates) <= 3
    by_wiring = {c.aux_hf_indices: c.live_accept_length for c in trace.candidates}
    for candidate in step.candidates:
        if candidate.live_accept_length is not None:
            assert by_wiring[candidate.aux_hf_indices] == candidate.live_accept_length
    assert trace.settings.via == "trace" and step.settings.via == "step"
    # over traces the exact accept length ranks (the training loss only breaks its ties)
    ranked = [(c.live_accept_length, c.score) for c in trace.candidates]
    assert ranked == sorted(ranked, reverse=True)
    assert f"live accept length {trace.best.live_accept_length:.2f}" in trace.verdict


def test_every_candidate_replayed_in_one_batch_counts_as_its_lone_replay(bigram_setup):
    """The probe replays all its candidates as one batch (one wiring per row, the target capturing the
    union of their layers); each wiring's accept length is the one its own replay gives."""
    from backend.diagnostics.probe import live_accept_lengths
    from tests.support.models import load_draft

    setup = bigram_setup
    draft, _ = load_draft(setup.root / "miswired", setup.target)
    wirings = [(2, 4, 5), (0, 1, 2), (1, 3, 4), (0, 4, 6)]
    together = live_accept_lengths(setup.target, draft, wirings, setup.samples[:2], 3, 20)
    alone = [live_accept_lengths(setup.target, draft, [w], setup.samples[:2], 3, 20)[0] for w in wirings]
    assert together == alone and len({tuple(c) for c in together}) > 1


def test_probe_confirms_a_correct_declaration(bigram_setup):
    from backend.diagnostics.probe import ProbeSettings, run_probe
    from tests.support.models import load_draft

    setup = bigram_setup
    draft, wiring = load_draft(setup.root / "right", setup.target)
    report = run_probe(setup.target, draft, wiring, setup.samples, ProbeSettings(3, 5))
    assert report.confirmed and report.verdict.startswith("The declared wiring")


def test_initial_candidates_read_the_declared_ids_in_both_conventions(bigram_setup):
    from backend.diagnostics.probe import initial_candidates
    from tests.support.models import load_draft

    draft, wiring = load_draft(bigram_setup.root / "miswired", bigram_setup.target)
    candidates = initial_candidates(draft, wiring, 8)
    assert candidates[(2, 4, 5)][0] == "declared" and "nested ids read as HF indices" in candidates[(1, 3, 4)]
    assert "embedding output for the low layer" in candidates[(0, 4, 5)]
    assert all(len(set(c)) == 3 and all(0 <= i <= 8 for i in c) for c in candidates)


def test_wirings_inside_the_noise_of_the_best_are_named_as_good():
    """Two neighbouring layers of a deep target can serve a draft equally: the probe names every wiring
    within two standard errors of the best instead of claiming the best is the trained one."""
    from backend.diagnostics.probe import ProbeResult, ProbeSettings
    from backend.diagnostics.probe_report import Ranking, verdict
    from backend.diagnostics.probe_settings import METHOD, Candidate

    declared = Candidate((2, 6, 9), "declared", [0.143, 0.1], 762)
    best = Candidate((0, 1, 6), "search", [0.592, 0.5], 762)
    tie = Candidate((0, 2, 6), "seed shift", [0.584, 0.5], 762)
    far = Candidate((0, 4, 6), "search", [0.40, 0.3], 762)

    def report(candidates):
        return Ranking(declared, candidates, 6)

    tied = report([best, tie, far, declared])
    assert not tied.confirmed and tied.as_good == [tie]  # margin 2 * sqrt(.592 * .408 / 762) = 0.036
    text = verdict(tied, 12)
    assert text.startswith("The draft was not trained on the declared HF [2, 6, 9]")
    assert "cannot tell it from HF [0, 2, 6] (acc_0 0.584)" in text and "[0, 4, 6]" not in text
    assert "±0.036 acc_0, two standard errors over 762 positions" in text  # no per-sample scores: the margin
    # issue 43 row 1: one tied set everywhere, and no wiring written until the probe separates one
    assert "cannot tell HF [0, 1, 6] / HF [0, 2, 6] apart, so no wiring is written yet" in text
    as_dict = tied.result(text, "config", 1.0, 2).to_dict()
    assert as_dict["tied"] == [[0, 1, 6], [0, 2, 6]] and as_dict["as_good_as_best"] == [[0, 2, 6]]
    assert as_dict["config"] is None and "--limit 24" in as_dict["how_to_separate"]
    alone = report([best, far, declared])
    assert alone.as_good == [] and verdict(alone, 12).startswith("The draft was trained on HF [0, 1, 6]")
    written = alone.result("", "config", 1.0, 2).config
    assert written.vllm == {"eagle_aux_hidden_state_layer_ids": [0, 1, 6]}
    assert written.sglang == {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0, 5]}}
    # as views keep it: the pair, the settings and who ran it, read back the same
    kept = alone.result(
        "",
        "config",
        1.0,
        2,
        target="t",
        draft="d",
        settings=ProbeSettings(2, 5).describe([]),
        ran_by="the probe tab",
    )
    settings = {
        "num_steps": 2, "search_budget": 5, "live_samples": 0, "sample_keys": [], "method": METHOD, "via": "step",
    }  # fmt: skip
    extra = {"target": "t", "draft": "d", "settings": settings, "ran_by": "the probe tab"}
    assert {k: kept.to_dict()[k] for k in extra} == extra and ProbeResult.from_dict(kept.to_dict()) == kept


def _redeclared(setup, tmp_path, name: str, top_level_ids: list[int]):
    """The `right` draft (trained on HF [0, 2, 4]) with its nested ids removed and a top-level list in
    their place, `architectures` still SpecForge's LlamaForCausalLMEagle3 (issue 33's config)."""
    import json
    import shutil

    directory = tmp_path / name
    shutil.copytree(setup.root / "right", directory)
    config = json.loads((directory / "config.json").read_text())
    config.pop("eagle_config", None)
    config["eagle_aux_hidden_state_layer_ids"] = top_level_ids
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_a_top_level_declaration_is_read_as_declared_and_the_probe_confirms_it(bigram_setup, tmp_path):
    """SpecForge ignores a top-level list, but the default reading must not replace declared ids
    with the defaults: the declared HF [0, 2, 4] is what the replay, teacher and probe run."""
    from backend.diagnostics.probe import ProbeSettings, run_probe
    from backend.drafts.readings import read_as
    from tests.support.models import load_draft

    setup = bigram_setup
    draft, wiring = load_draft(_redeclared(setup, tmp_path, "top", [0, 2, 4]), setup.target)
    assert list(wiring.aux_hf_indices) == [0, 2, 4]
    view = read_as("auto", draft.config, 8, has_own_embedding=False)
    assert list(view.wiring.aux_hf_indices) == [0, 2, 4] and "top-level" in view.wiring.source
    assert "SpecForge" in view.wiring.source and "[2, 4, 5]" in view.wiring.source  # what it would run
    specforge = read_as("specforge", draft.config, 8, has_own_embedding=False)
    assert list(specforge.wiring.aux_hf_indices) == [2, 4, 5]  # the engine itself still ignores it
    report = run_probe(setup.target, draft, wiring, setup.samples, ProbeSettings(3, 5))
    assert report.confirmed and report.best.aux_hf_indices == (0, 2, 4)


def test_a_declared_wiring_that_repeats_an_index_is_run_as_given(bigram_setup, tmp_path):
    from backend.diagnostics.probe import ProbeSettings, run_probe
    from tests.support.models import load_draft

    setup = bigram_setup
    draft, wiring = load_draft(_redeclared(setup, tmp_path, "repeat", [2, 3, 3]), setup.target)
    assert list(wiring.aux_hf_indices) == [2, 3, 3]
    report = run_probe(setup.target, draft, wiring, setup.samples, ProbeSettings(3, 10))
    assert report.declared.aux_hf_indices == (2, 3, 3)
    assert not report.confirmed and report.best.aux_hf_indices[0] == 0  # the search finds the embedding


def _losses(wiring, base, shifts):
    """A candidate with per-position training losses: `base` (one tensor per sample) plus `shifts`."""
    import torch

    from backend.diagnostics.probe_settings import Candidate

    position_loss = [b + torch.as_tensor(d, dtype=torch.float32) for b, d in zip(base, shifts, strict=True)]
    total = sum(float(x.sum()) for x in position_loss) / sum(len(x) for x in position_loss)
    return Candidate(wiring, "", [0.4, 0.3], 512, loss=total, position_loss=position_loss)


def test_a_small_loss_gap_every_block_shows_separates_and_one_blocks_reverse_does_not():
    """Issue 58: candidates are compared paired, position by position, with the standard error from
    blocks of 16 positions, so a small gap every block shows separates and a larger one that some
    blocks reverse does not; a tie says how many samples would separate it."""
    import torch

    from backend.diagnostics.probe_report import BLOCK, Ranking, loss_t, samples_to_separate, separates

    generator = torch.Generator().manual_seed(0)
    base = [3 + torch.rand(64, generator=generator) * 4 for _ in range(8)]  # what every wiring finds hard
    best = _losses((0, 2, 15), base, [0.0] * 8)
    small = [0.02 + 0.002 * torch.randn(64, generator=generator) for _ in range(8)]
    consistent = _losses((0, 3, 15), base, small)
    t, n, blocks = loss_t(best, consistent)
    assert n == 512 and blocks == 512 // BLOCK and t > 20 and separates(best, consistent)
    reversing = [torch.tensor([0.2 if (i // BLOCK) % 2 else -0.15 for i in range(64)]) for _ in range(8)]
    mixed = _losses((0, 1, 15), base, reversing)  # ahead in half the blocks, behind in the others
    assert mixed.loss > best.loss and not separates(best, mixed)
    declared = _losses((2, 15, 27), base, [3.0] * 8)
    report = Ranking(declared, [best, mixed, consistent, declared], 8)
    assert not report.confirmed and [c.aux_hf_indices for c in report.tied] == [(0, 2, 15), (0, 1, 15)]
    needed = samples_to_separate(best, mixed, 8)
    assert needed == report.samples_needed() and needed > 8
    text = report.how_to_separate()
    assert f"about {needed} would" in text and f"--limit {needed}" in text
    assert separates(best, declared) and samples_to_separate(best, declared, 8) is None


def test_the_training_loss_ranks_and_acc_0_does_not():
    """The real pair's miswired draft on 8 samples: HF [0, 3, 15] has the higher acc_0 (0.413 vs 0.397)
    and the higher training loss; the trained [0, 2, 15], lower in loss, ranks first. Wirings the draft
    cannot tell apart (it reads none of the states they differ in) are named level, and no sample count
    is asked for."""
    import torch

    from backend.diagnostics.probe_report import Ranking

    base = [torch.full((32,), 3.0) for _ in range(4)]
    trained = _losses((0, 2, 15), base, [0.0] * 4)
    sharper = _losses((0, 3, 15), base, [0.03] * 4)
    trained.acc_per_step, sharper.acc_per_step = [0.397], [0.413]
    assert sharper.acc_step0 > trained.acc_step0 and trained.score > sharper.score
    twin = _losses((0, 4, 15), base, [0.0] * 4)
    declared = _losses((2, 15, 27), base, [3.0] * 4)
    report = Ranking(declared, [trained, twin, sharper, declared], 4)
    assert [c.aux_hf_indices for c in report.tied] == [(0, 2, 15), (0, 4, 15)]
    text = report.how_to_separate()
    assert "score the same at every position" in text and "--limit" not in text
