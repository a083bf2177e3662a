"""Runs are stored and read back typed (backend/engine/run_settings.py)."""

from __future__ import annotations

from backend.engine.run_settings import RunSettings


def test_settings_round_trip_through_their_stored_dict():
    settings = RunSettings(
        num_steps=3,
        max_new_tokens=40,
        device="cpu",
        dtype="float32",
        wiring_override=(0, 2, 4),
        engine="sglang",
        engine_requested="sglang",
        topk=4,
        num_draft_tokens=8,
        temperature=0.7,
        top_p=0.9,
        seed=5,
        sampling_rule="sglang",
        draft_attention="ancestors",
        decoding_notes=("a note",),
    )
    stored = settings.to_dict()
    assert stored["wiring_override"] == [0, 2, 4] and stored["decoding_notes"] == ["a note"]
    assert RunSettings.from_dict(stored) == settings
    assert settings.mode == "tree k=4 N=8 sampled T=0.7 top_p=0.9 seed=5"
    assert not settings.greedy and not settings.greedy_chain


def test_an_older_run_reads_with_defaults_and_keeps_what_it_does_not_know():
    """Runs stored before trees and sampling existed are greedy chains; unknown keys survive."""
    old = {"num_steps": 4, "max_new_tokens": 64, "device": "cpu", "dtype": "float32", "k": 1}
    settings = RunSettings.from_dict(old)
    assert (settings.topk, settings.sampling_rule, settings.mode) == (1, None, "chain greedy")
    assert settings.greedy_chain and settings.extra == {"k": 1}
    assert settings.to_dict()["k"] == 1 and RunSettings.from_dict(settings.to_dict()) == settings
    assert RunSettings.from_dict(None) == RunSettings()


def test_what_a_request_decides_is_compared_by_equality():
    chain = RunSettings(num_steps=3, max_new_tokens=32, device="cpu", draft_attention="ancestors")
    assert chain.asked.draft_attention is None  # a chain has no draft attention to match
    assert chain.asked == RunSettings(num_steps=3, max_new_tokens=32, device="cuda").asked  # not asked
    assert chain.asked != RunSettings(num_steps=3, max_new_tokens=33).asked
    assert RunSettings.from_dict({"temperature": "0.5"}).temperature == 0.5  # stored as text somewhere
