"""Stored runs for the pages and the CLI: list, read with steps, files, export, delete."""

from __future__ import annotations

import json

import pytest

from backend import BadInput


def test_list_read_export_and_delete(stored_run, tmp_path):
    from backend.service import runs

    url, run_id = stored_run
    (listed,) = runs.list_runs(url)
    run, steps = runs.get_run_with_steps(url, run_id)
    assert listed.id == run.id == run_id and run.status == "finished" and len(steps) == run.step_count > 0
    assert runs.get_run(url, run_id).output_ids == run.output_ids
    assert {r["chunk"] for r in runs.token_stats(url, run_id)} == {f"hf{i}" for i in run.aux_hf_indices}
    assert runs.token_stat_references(url, run_id) == []
    document = json.loads(runs.run_file(run, steps, "json"))
    assert document["id"] == run_id and [s["bonus_id"] for s in document["steps"]] == [
        s.bonus_id for s in steps
    ]
    csv = runs.run_file(run, steps, "csv").decode()
    assert csv.startswith("step,run_id,target,draft,num_steps_k,step_index,")  # issue 43 row 9: readable
    assert "drafted_text" in csv.splitlines()[0] and "committed_text" in csv.splitlines()[0]
    assert runs.run_file(run, steps, "parquet")[:4] == b"PAR1"
    out = runs.export(url, run_id, "json", tmp_path / "run.json")
    assert json.loads(out.read_text())["id"] == run_id
    with pytest.raises(BadInput, match="no run 999"):
        runs.export(url, 999, "csv", tmp_path / "x.csv")
    with pytest.raises(BadInput, match="unknown format"):
        runs.export(url, run_id, "xml", tmp_path / "x.xml")
    assert runs.delete_run(url, run_id) and not runs.delete_run(url, run_id)
    assert runs.get_run(url, run_id) is None and runs.get_run_with_steps(url, run_id) == (None, [])


def test_find_finished_run_matches_target_draft_prompt_and_every_setting(stored_run, pairs):
    from dataclasses import replace

    from backend.run.request import ReplayRequest
    from backend.service import runs

    url, run_id = stored_run
    pair = pairs["copy-L4-bigram"]
    same = ReplayRequest(
        str(pair.target_dir), str(pair.draft_dir), prompt_ids=(1, 5, 9), num_steps=3, max_new_tokens=12
    )
    stored = runs.get_run(url, run_id)
    assert runs.find_finished_run(url, same).id == run_id
    assert runs.find_finished_run(url, same, stored.params["device"], stored.params["dtype"]).id == run_id
    assert runs.find_finished_run(url, replace(same, sample_ref="elsewhere")).id == run_id  # a label only
    assert (
        runs.find_finished_run(url, replace(same, topk=1, num_draft_tokens=4)).id == run_id
    )  # SGLang's chain
    different = [
        replace(same, prompt_ids=(1, 5, 8)),
        replace(same, draft=str(pairs["random-L2"].draft_dir)),
        replace(same, target=str(pairs["random-L2"].target_dir)),
        replace(same, num_steps=2),
        replace(same, max_new_tokens=13),
        replace(same, topk=2, num_draft_tokens=4),
        replace(same, temperature=0.7),
        replace(same, seed=1),
        replace(same, top_p=0.9),
        replace(same, engine="vllm"),
        replace(same, aux_hf_indices=(0, 1, 2)),
    ]
    assert [runs.find_finished_run(url, request) for request in different] == [None] * len(different)
    assert runs.find_finished_run(url, same, device="cuda:7") is None
    assert runs.find_finished_run(url, same, dtype="float16") is None
    assert runs.find_finished_run(url, replace(same, prompt_ids=None, prompt_text="hi")) is None
    runs.delete_run(url, run_id)
    assert runs.find_finished_run(url, same) is None


def test_find_finished_run_skips_unfinished_runs_and_prefers_the_same_sample(db_url):
    from dataclasses import replace

    from backend.data.samples import Sample
    from backend.run.request import ReplayRequest
    from backend.service import runs
    from db import store

    request = ReplayRequest("t", "d", prompt_ids=(1, 2), num_steps=2, max_new_tokens=8)
    from backend.run.run_value import Resolved
    from backend.run.run_value import params as params_of

    params = params_of(request, Resolved(device="cpu", dtype="float32"))  # stored as a replay stores it
    factory = store.session_factory(store.make_engine(db_url))
    with store.session_scope(factory) as session:
        dataset = store.create_dataset(
            session, name="two", path=None, format="jsonl", samples=[Sample([1, 2, 3], [0, 0, 1], 2)] * 2
        )
        first, second = (s.id for s in store.get_samples(session, dataset))

        def make(status: str, sample_id=None, **changes) -> int:
            run_id = store.create_run(
                session,
                kind="replay",
                target_path="t",
                draft_path="d",
                params={**params, **changes},
                aux_hf_indices=[0, 1, 2],
                given=store.RunInput([1, 2], sample_id=sample_id),
            )
            if status == "finished":
                store.finish_run(session, run_id, output_ids=[3], metrics={})
            elif status == "failed":
                store.fail_run(session, run_id, error="boom")
            return run_id

        of_first = make("finished", first)
        make("failed", second)
        not_recorded = make("finished", second, record=False)
        of_second = make("finished", second)
        newest = make("finished")
    assert runs.find_finished_run(db_url, request).id == newest  # no sample asked: the newest
    assert runs.find_finished_run(db_url, replace(request, sample_id=first)).id == of_first
    assert runs.find_finished_run(db_url, replace(request, sample_id=second)).id == of_second
    # a recorded request needs a recorded run; an unrecorded one takes either
    assert runs.find_finished_run(db_url, replace(request, sample_id=second, record=False)).id == of_second
    runs.delete_run(db_url, of_second)
    assert runs.find_finished_run(db_url, replace(request, sample_id=second)).id == newest
    assert runs.find_finished_run(db_url, replace(request, sample_id=second, record=False)).id == not_recorded


def _run(run_id: int, sample_ref: str | None, target_path: str = "t"):
    from datetime import datetime

    from backend.service.runs import RunInfo

    return RunInfo(
        run_id, "replay", "finished", None, target_path, "d", sample_ref, [1, 2], {}, [0, 1, 2], [3], {},
        None, None, datetime(2025, 1, 1), None,
    )  # fmt: skip


def test_a_runs_source_is_read_from_the_samples_file_its_ref_names_once_per_file(tmp_path):
    """Issue 58 row 8: a `replay --samples FILE --index I` run stores "FILE#I" and no source; the Runs
    page searches the source read from that file: the I-th valid record for the run's target's vocab
    (as `replay --index` counts), the file read once for a list of hundreds of its runs, a missing
    file or index no source (never an error)."""
    import os

    from backend.service import runs

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"vocab_size": 100}))
    path = tmp_path / "eval.jsonl"
    records = [
        {"input_ids": [1, 2], "loss_mask": [0, 1], "source": "HumanEval/0"},
        {"input_ids": [1, 500], "loss_mask": [0, 1], "source": "outside the vocab"},  # not counted
        {"input_ids": [1, 2], "loss_mask": [0, 1], "source": "HumanEval/2"},
        {"input_ids": [1, 2], "loss_mask": [0, 1]},  # no source field
    ]
    path.write_text("not json\n" + "\n".join(json.dumps(r) for r in records) + "\n")
    listed = [_run(n, f"{path}#1", str(target)) for n in range(300)] + [
        _run(300, f"{path}#0", str(target)),
        _run(301, f"{path}#2", str(target)),  # the record without a source
        _run(302, f"{path}#9", str(target)),
        _run(303, f"{tmp_path / 'gone.jsonl'}#0", str(target)),
        _run(304, "prompt"),
        _run(305, None),
        _run(306, "dataset 1 #0"),
    ]
    runs._file_sources.cache_clear()
    found = runs.file_sample_sources(listed)
    assert found == {**{n: "HumanEval/2" for n in range(300)}, 300: "HumanEval/0"}
    assert runs._file_sources.cache_info().hits >= 300  # read once, not once a run
    path.write_text(json.dumps({**records[0], "source": "edited/0"}) + "\n")
    os.utime(path, (1, 1))  # a new mtime: the edited file is read again
    assert runs.file_sample_sources(listed[300:302]) == {300: "edited/0"}
    path.write_text("")
    path.chmod(0)  # unreadable (a root test run can still read it: then simply no record)
    assert runs.file_sample_sources(listed[:1]) == {}
