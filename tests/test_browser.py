"""The dashboard in a real browser, two walks on one Streamlit server and one Chromium (the session's
`dashboard` fixture, tests/conftest.py), in this order on its fresh database:

1. the whole dashboard on the bundled demo: import a dataset (with hostile token text and a corrupt
   line), run a decode, step through it, compare, diagnose, list runs;
2. a newcomer's path (issue 31): Home's story and its start-here links, Compare final vs miswired, the
   Diagnostics verdict, the wiring probe and the lint; each number the pages show is checked against the
   database and against the CLI's --json for the same run.

Screenshots land in tests/artifacts/browser/."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from backend.defaults import DEMO_DRAFTS, DEMO_EVAL, DEMO_TARGET
from tests.support.browser import (
    BROWSER_MARKS,
    SHOTS,
    open_expander,
    press_until,
    probe_then_lint,
    selected,
    wait_idle,
)
from tests.support.cli import cli_json
from tests.support.demo import demo_wiring

pytestmark = BROWSER_MARKS


cli = cli_json  # the CLI's --json for the same run (tests/support/cli.py)


def metric(page, label: str) -> str:
    """The value a st.metric labelled `label` shows."""
    box = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return box.locator('[data-testid="stMetricValue"]').inner_text().strip()


def compare_final_with_miswired(page, db_url: str) -> None:
    """Home's link 1 opens Compare on final vs miswired; the accept lengths shown are the stored runs'
    and equal the CLI's replay of the same sample and settings."""
    from backend.service.runs import get_run

    page.get_by_role("link", name=re.compile(r"^1\. Compare final with miswired")).click()
    page.get_by_role("button", name="Compare on this sample").wait_for(timeout=60_000)
    wait_idle(page)
    assert (selected(page, "Draft A"), selected(page, "Draft B")) == ("final", "miswired")
    assert selected(page, "Draft") == "final"  # the link sets the compared drafts, not the active one
    page.get_by_role("button", name="Compare on this sample").click()
    page.get_by_text("Samples where the drafts differ most").wait_for(timeout=300_000)
    wait_idle(page)
    page.screenshot(path=str(SHOTS / "newcomer_2_compare.png"), full_page=True)
    run_a = int(re.match(r"run (\d+)", selected(page, "Run A")).group(1))
    run_b = int(re.match(r"run (\d+)", selected(page, "Run B")).group(1))
    stored_a, stored_b = get_run(db_url, run_a), get_run(db_url, run_b)
    assert stored_a.draft_path.endswith("final") and stored_b.draft_path.endswith("miswired")
    shown_a, shown_b = metric(page, "Accept length A"), metric(page, "Accept length B")
    assert shown_a == f"{stored_a.metrics['mean_accept_length']:.2f}"
    assert shown_b == f"{stored_b.metrics['mean_accept_length']:.2f}"
    assert metric(page, "Outputs first differ at") == "nowhere"  # greedy: both outputs are the target's own
    assert float(shown_a) > float(shown_b)  # the broken draft is accepted less
    for draft, shown in (("final", shown_a), ("miswired", shown_b)):
        replay = cli(
            "replay",
            "--draft",
            str(DEMO_DRAFTS / draft),
            "--samples",
            str(DEMO_EVAL),
            "--index",
            "0",
            "--steps",
            "4",
            "--max-new-tokens",
            "96",
            "--no-record",
        )
        assert f"{replay['mean_accept_length']:.2f}" == shown, (draft, replay["mean_accept_length"], shown)


def diagnose_miswired(page, url: str) -> str:
    """Home's link 2 opens Diagnostics with miswired active; its verdict names the wiring it measured."""
    page.goto(url)
    page.get_by_text("What the bundled toy pair shows").wait_for(timeout=60_000)
    wait_idle(page)
    page.get_by_role("link", name=re.compile(r"^2\. Diagnose miswired")).click()
    page.get_by_role("button", name="Diagnose", exact=True).wait_for(timeout=180_000)
    wait_idle(page)
    assert (
        str(DEMO_DRAFTS / "miswired")
        in page.get_by_text(re.compile(r"^Target .* · draft ")).first.inner_text()
    )
    page.get_by_role("button", name="Diagnose", exact=True).click()
    verdict = page.locator('[data-testid="stAlert"]').filter(has_text=re.compile(r"^Broken: "))
    verdict.first.wait_for(timeout=600_000)
    wait_idle(page)
    page.screenshot(path=str(SHOTS / "newcomer_3_diagnose.png"), full_page=True)
    shown = verdict.first.inner_text()
    # the verdict is the CLI's object and names the tied wirings once (asserted against `diagnose --json`
    # in tests/pages/test_diagnostics.py): here, that the page says it and measured it
    assert "aux-wiring" in " ".join(page.locator("summary").all_inner_texts()), shown
    assert re.search(r"HF \[\d+, \d+, \d+\]", shown), shown
    assert re.fullmatch(r"\d+\.\d\d", metric(page, "Live accept length (measured)"))
    return shown


def lint_recommends_one_command(page, shot) -> None:
    """Row 3: on the lint tab the seed's SGLang command gets one recommended command, and every fix
    that names a chain names the chain that command runs (the what-if's best K on a stored run)."""
    page.locator('[data-testid="stRadio"]').get_by_text("SGLang", exact=True).first.click()
    press_until(page, "Lint", "Recommended command")
    wait_idle(page)
    # the lint's own block: a probe kept on this pair shows its config blocks on the page too
    command = page.locator('[data-testid="stCode"]').filter(has_text="launch_server").first.inner_text()
    assert "--speculative-algorithm EAGLE3" in command, command
    chain = re.search(
        r"--speculative-num-steps \d+ --speculative-eagle-topk 1 --speculative-num-draft-tokens \d+", command
    ).group(0)
    fixes = [
        t.split("Fix:")[1] for t in page.locator('[data-testid="stAlert"]').all_inner_texts() if "Fix:" in t
    ]
    named = [f for f in fixes if "--speculative-num-steps" in f]
    assert named and all(chain in f for f in named), (chain, named)
    page.screenshot(path=str(shot), full_page=True)


def compare_keeps_its_pair(page) -> None:
    """Row 6: back on Compare through the sidebar, the pickers still show the comparison on screen."""
    page.locator('[data-testid="stSidebarNav"], [data-testid="stSidebar"]').get_by_role(
        "link", name="Compare"
    ).first.click()
    page.get_by_role("button", name="Compare on this sample").wait_for(timeout=60_000)
    wait_idle(page)
    assert (selected(page, "Draft A"), selected(page, "Draft B")) == ("final", "miswired")


def decode_opens_on_a_telling_reference(page) -> None:
    """Row 5: a new Decode run of miswired opens its hidden-state panel on the probe's wiring (the
    probe ran above), which differs from the declared one: not on a blank draft-out cosine."""
    page.locator('[data-testid="stSidebar"]').get_by_role("link", name="Decode").first.click()
    page.get_by_text("Start a replay").first.wait_for(timeout=60_000)
    wait_idle(page)
    open_expander(page, "Start a replay")  # collapsed once runs exist
    page.get_by_role("spinbutton", name="Max new tokens", exact=True).wait_for(timeout=60_000)
    page.get_by_role("spinbutton", name="Max new tokens", exact=True).fill("16")
    page.get_by_role("spinbutton", name="Max new tokens", exact=True).press("Enter")
    wait_idle(page)
    before = selected(page, "Run")  # the page shows the newest stored run until the new one ends
    page.get_by_role("button", name="Start").click()
    deadline = time.time() + 300
    while time.time() < deadline and not (
        selected(page, "Run") != before and " · finished · miswired" in selected(page, "Run")
    ):
        page.wait_for_timeout(1000)
    wait_idle(page)
    page.get_by_text(re.compile(r"^Step 1 of")).wait_for(timeout=60_000)
    reference = selected(page, "Reference")
    assert reference.startswith("wiring HF ") and "wiring probe's best" in reference, reference
    page.screenshot(path=str(SHOTS / "newcomer_6_decode.png"), full_page=True)


HOSTILE = "x = '<script>alert(1)</script>' + '<img src=x onerror=alert(1)>'\n"

pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def hostile_dataset(tmp_path_factory) -> Path:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(DEMO_TARGET / "tokenizer.json"))
    prompt = tokenizer.encode("def render(value):\n    return ").ids
    response = tokenizer.encode(HOSTILE).ids
    ids = prompt + response
    record = {
        "input_ids": ids,
        "loss_mask": [0] * len(prompt) + [1] * len(response),
        "seq_len": len(ids),
        "n_prompt_tokens": len(prompt),
        "n_response_tokens": len(response),
        "source": "hostile` [phish](https://evil.example/login) `x",  # Markdown must stay text
    }
    path = tmp_path_factory.mktemp("browser") / "hostile.jsonl"
    path.write_text(json.dumps(record) + "\n{broken json\n")
    return path


def heatmap_span(page) -> tuple[int, int]:
    """The positions the Decode heatmap covers, from its title ("norm · positions A..B · ...")."""
    title = page.locator(".stPlotlyChart").filter(has_text="outlined").first.inner_text()
    found = re.search(r"positions (\d+)\.\.(\d+)", title)
    assert found, title
    return int(found.group(1)), int(found.group(2))


def test_dashboard_in_chromium(dashboard, hostile_dataset):
    """First on the session's fresh database: its run numbers count from 1."""
    from backend.service.runs import list_runs

    url = dashboard.url
    before = len(list_runs(dashboard.db_url))
    assert before == 0, "this walk runs first, on the dashboard fixture's fresh database"

    def run(number: int) -> str:  # the label of this walk's number-th run
        return f"run {before + number} "

    dialogs = []
    with dashboard.page({"width": 1500, "height": 2200}) as page:
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

        page.goto(url)
        page.get_by_text("Active setup").first.wait_for(timeout=60_000)
        wait_idle(page)
        assert page.get_by_text("demo/target").first.is_visible()
        page.screenshot(path=str(SHOTS / "1_home.png"), full_page=True)

        # Samples: import by path; the corrupt line is reported, the good record is shown as text
        page.goto(f"{url}/Samples")
        page.get_by_text("Import a dataset").click()
        page.get_by_label("File or folder path").fill(str(hostile_dataset))
        page.get_by_label("File or folder path").press("Enter")
        wait_idle(page)
        page.get_by_role("button", name="Import", exact=True).click()
        page.get_by_text(re.compile(r"imported 1 sample \(format: jsonl\), rejected 1")).wait_for(
            timeout=60_000
        )
        wait_idle(page)
        page.screenshot(path=str(SHOTS / "2_samples.png"), full_page=True)
        shown = page.locator(".sl-text").first.inner_text()
        assert "<script>alert(1)</script>" in shown and "<img src=x onerror=alert(1)>" in shown
        assert page.locator("img[src='x']").count() == 0 and page.locator("script:text('alert')").count() == 0
        assert page.locator("a[href*='evil.example']").count() == 0  # the source's Markdown is inert
        assert page.get_by_text("[phish]").count() >= 1

        # Decode: a replay of the demo pair in the background, then step through it
        page.goto(f"{url}/Decode")
        page.get_by_text("Start a replay").first.wait_for(timeout=60_000)
        wait_idle(page)
        open_expander(page, "Start a replay")  # collapsed once the database holds runs
        page.get_by_role("button", name="Start").wait_for(timeout=60_000)
        page.get_by_role("spinbutton", name="Max new tokens", exact=True).fill("48")
        page.get_by_role("spinbutton", name="Max new tokens", exact=True).press("Enter")
        wait_idle(page)
        page.get_by_role("button", name="Start").click()
        page.get_by_text(re.compile(r"^Step 1 of")).wait_for(timeout=180_000)
        wait_idle(page)
        assert selected(page, "Run").startswith(run(1) + "· finished")  # the finished replay is shown
        page.get_by_role("button", name="Next ▶").click()
        page.get_by_text(re.compile(r"^Step 2 of")).wait_for(timeout=30_000)
        wait_idle(page)
        page.get_by_role("button", name=re.compile(r"^Next rejection: step \d+ »")).click()
        wait_idle(page)
        assert page.locator(".sl-chip").count() >= 2 and page.locator(".sl-cur").count() >= 1
        page.locator("[data-step='3']").first.click()  # a token of the output opens its step
        page.get_by_text(re.compile(r"^Step 4 of")).wait_for(timeout=30_000)
        wait_idle(page)
        page.screenshot(path=str(SHOTS / "3_decode.png"), full_page=True)

        # Decode: a hidden-state reference finishes on screen (no refresh) and is selected
        open_expander(page, "Add a hidden-state reference")
        indices = page.get_by_role("textbox", name="HF indices", exact=True)
        indices.fill("0,2,4")  # prefilled with a reading to compare (the probe's or a default); typed here
        indices.press("Enter")
        wait_idle(page)
        page.get_by_role("button", name="Compute").click()
        page.get_by_text(re.compile(r"rows stored as 'wiring HF \[0, 2, 4\]'")).wait_for(timeout=120_000)
        wait_idle(page)
        assert "wiring HF [0, 2, 4]" in selected(page, "Reference")
        assert "cosine" in page.locator(".stPlotlyChart").filter(has_text="outlined").first.inner_text()

        # Decode: a tree (SGLang's topk 4, 8 draft tokens); the step viewer draws the step's tree
        open_expander(page, "Start a replay")
        page.get_by_role("spinbutton", name="topk", exact=True).fill("4")
        page.get_by_role("spinbutton", name="topk", exact=True).press("Enter")
        page.get_by_role("spinbutton", name="Draft tokens N", exact=True).fill("8")
        page.get_by_role("spinbutton", name="Draft tokens N", exact=True).press("Enter")
        wait_idle(page)
        page.get_by_role("button", name="Start").click()
        page.get_by_text(re.compile(r"Decoding: tree k=4 N=8 greedy")).wait_for(timeout=180_000)
        page.get_by_text(re.compile(r"The step's draft tree: 7 nodes")).wait_for(timeout=60_000)
        wait_idle(page)
        assert page.locator(".stPlotlyChart").count() >= 1
        assert selected(page, "Run").startswith(run(2) + "· finished")
        page.screenshot(path=str(SHOTS / "3b_decode_tree.png"), full_page=True)

        # Decode: a long replay survives a reload (its progress stays on screen), then it is shown
        # whole: the heatmap of the finished run covers every position
        open_expander(page, "Start a replay")
        page.get_by_role("spinbutton", name="topk", exact=True).fill("1")
        page.get_by_role("spinbutton", name="topk", exact=True).press("Enter")
        page.get_by_role("spinbutton", name="Draft tokens N", exact=True).fill("0")
        page.get_by_role("spinbutton", name="Draft tokens N", exact=True).press("Enter")
        page.get_by_role("spinbutton", name="Max new tokens", exact=True).fill("600")
        page.get_by_role("spinbutton", name="Max new tokens", exact=True).press("Enter")
        wait_idle(page)
        page.get_by_role("button", name="Start").click()
        page.locator('[data-testid="stProgress"]').first.wait_for(timeout=60_000)
        page.reload()
        page.locator('[data-testid="stProgress"]').first.wait_for(timeout=30_000)
        page.screenshot(path=str(SHOTS / "3c_decode_reloaded_running.png"), full_page=True)
        deadline = time.time() + 600  # no click from here on: the page must show the end by itself
        while not selected(page, "Run").startswith(run(3) + "· finished") and time.time() < deadline:
            page.wait_for_timeout(1000)
        assert selected(page, "Run").startswith(run(3) + "· finished")
        wait_idle(page)  # the rerun that shows the end may still be replacing the last poll's elements
        # the run is stored finished a moment before its job returns (the output decoded, the result
        # handed back): under load the last poll can still show the job's bar; it must go by itself
        page.locator('[data-testid="stProgress"]').first.wait_for(state="detached", timeout=60_000)
        page.get_by_text(re.compile(r"^Step 1 of")).wait_for(timeout=60_000)
        wait_idle(page)
        tokens = int(
            page.locator('[data-testid="stMetric"]').filter(has_text="Tokens").inner_text().split()[-1]
        )
        # it opens on a comparison that tells healthy from broken (issue 43 row 5: the wiring a serving
        # engine would feed this draft), in a window around the step (issue 31 item 8); the whole run of
        # fed features covers prompt and output
        assert selected(page, "Reference").startswith("wiring HF "), selected(page, "Reference")
        first, last = heatmap_span(page)
        assert last - first <= 128, (first, last)
        page.get_by_role("combobox", name="Reference", exact=True).first.click()
        page.get_by_role("option", name="fed features only (norms)").click()
        wait_idle(page)
        page.get_by_text("the whole run", exact=True).click()
        wait_idle(page)
        first, last = heatmap_span(page)
        assert first == 0 and last >= tokens, (first, last, tokens)  # prompt + output, all of it
        chart = page.locator(".stPlotlyChart").filter(has_text="outlined").first.bounding_box()
        assert chart["width"] > 700, chart  # the page's width, not a side column's (was about 140 px)
        page.screenshot(path=str(SHOTS / "3d_decode_long_run.png"), full_page=True)

        # Compare: epoch1 vs final on the first sample of the demo dataset
        page.goto(f"{url}/Compare")
        page.get_by_role("button", name="Compare on this sample").click()
        page.get_by_text("Two runs side by side").wait_for(timeout=60_000)
        page.get_by_text("Samples where the drafts differ most").wait_for(timeout=180_000)
        wait_idle(page)
        # the new pair is opened and what differed is said in words
        assert selected(page, "Run A").startswith(run(4)) and selected(page, "Run B").startswith(run(5))
        assert page.get_by_text(re.compile(r"^At output position \d+")).count() == 1
        page.screenshot(path=str(SHOTS / "4_compare.png"), full_page=True)
        # a batch of two samples: the first pair is reused, its summary shown; each row opens its pair
        open_expander(page, "Run two drafts")
        page.get_by_label("Batch: first N samples", exact=True).fill("2")
        page.get_by_label("Batch: first N samples", exact=True).press("Enter")
        wait_idle(page)
        page.get_by_role("button", name="Compare on N samples").click()
        page.get_by_text(re.compile(r"1 run\(s\) reused|2 run\(s\) reused")).wait_for(timeout=240_000)
        wait_idle(page)
        assert page.get_by_text("Wins A / B / ties").count() == 1
        grid = page.locator('[data-testid="stDataFrame"]').first
        grid.scroll_into_view_if_needed()
        box = grid.bounding_box()
        pairs = []
        for row in (0, 1):
            page.mouse.click(box["x"] + 18, box["y"] + 35 + 35 * row + 17)  # the row's selection box
            wait_idle(page)
            page.wait_for_timeout(500)
            pairs.append((selected(page, "Run A").split(" · ")[0], selected(page, "Run B").split(" · ")[0]))
        assert sorted(pairs) == [(run(4).strip(), run(5).strip()), (run(6).strip(), run(7).strip())], pairs
        page.screenshot(path=str(SHOTS / "4b_compare_batch.png"), full_page=True)

        # Diagnostics: the lint on the flags of docs/seed-story.md
        page.goto(f"{url}/Diagnostics")
        page.get_by_role("tab", name="Serving-flag lint").click()
        # another engine reruns the page; the tab stays open (an unkeyed tab set went back to the first)
        for engine in ("vLLM", "SGLang"):
            page.locator(f'text="{engine}" >> visible=true').first.click()
            wait_idle(page)
            assert page.get_by_role("tab", name="Serving-flag lint").get_attribute("aria-selected") == "true"
        page.get_by_role("button", name="Lint").click()
        # the fix's name shows in the recommended command and in the finding: wait for the first
        page.get_by_text("topk1-draft-tokens-reset").first.wait_for(timeout=60_000)
        page.get_by_text("eagle-algorithm-eagle3-draft").first.wait_for(timeout=30_000)
        page.screenshot(path=str(SHOTS / "5_diagnostics_lint.png"), full_page=True)
        page.get_by_role("tab", name="Train vs serve").click()
        page.get_by_role("button", name="Diff", exact=True).click()
        page.get_by_text(re.compile(r"First mismatch: chunk0")).wait_for(timeout=120_000)
        wait_idle(page)
        page.screenshot(path=str(SHOTS / "5b_diagnostics_train_vs_serve.png"), full_page=True)
        # the mis-wired draft: the doctor reads it; the one verdict on the cheap checks alone points at
        # what sees the wiring (never a green OK)
        page.get_by_label("Draft").first.click()
        page.get_by_role("option", name="miswired").click()
        wait_idle(page)
        page.get_by_role("tab", name="Checkpoint doctor").click()
        page.get_by_role("button", name="Run the doctor").click()
        page.get_by_text(re.compile(r"^Preflight: ")).first.wait_for(timeout=180_000)
        wait_idle(page)
        page.screenshot(path=str(SHOTS / "5d_diagnostics_doctor_miswired.png"), full_page=True)
        page.get_by_text(re.compile("^Cheap checks only")).first.click()
        wait_idle(page)
        page.get_by_role("button", name="Diagnose", exact=True).click()
        page.get_by_text(re.compile(r"^Next: Diagnose on samples")).first.wait_for(timeout=180_000)
        wait_idle(page)
        shown = page.locator('[data-testid="stAlertContentSuccess"]').filter(has_text=re.compile(r"^OK: "))
        assert shown.count() == 0
        page.screenshot(path=str(SHOTS / "5f_diagnostics_cheap_verdict.png"), full_page=True)
        # the probe, then the vLLM lint on its finding: the newcomer's walk below, on this server

        # Runs: the history lists the decode and both compare runs
        page.goto(f"{url}/Runs")
        page.get_by_text(re.compile(rf"{before + 7} of {before + 7} runs")).wait_for(timeout=60_000)
        wait_idle(page)
        page.screenshot(path=str(SHOTS / "6_runs.png"), full_page=True)
        # issue 58 row 1: after a search that matched nothing is cleared, the picker, the facts and
        # delete name one run (the browser used to show the newest while the page used the old choice)
        page.get_by_role("combobox", name="Run", exact=True).click()
        page.locator('[role="option"]').nth(2).click()
        wait_idle(page)
        chosen = re.match(r"run (\d+)", selected(page, "Run")).group(1)
        search = page.get_by_role("textbox", name="Sample contains")
        for text in ("no such sample", ""):
            search.fill(text)
            search.press("Enter")
            wait_idle(page)
        open_expander(page, "Delete this run")
        assert re.match(r"run (\d+)", selected(page, "Run")).group(1) == chosen
        assert page.get_by_role("button", name=f"Delete run {chosen}", exact=True).count() == 1
    assert dialogs == [], f"a token string ran as code: {dialogs}"


def test_a_newcomer_follows_home_s_start_here_path(dashboard):
    """Second, on the same server and database: Home's story and start-here links as a newcomer meets
    them. Every run it checks is read off the page (the first walk's runs are in the database too), and
    the dashboard walk runs no probe, so the probe the database holds here is Diagnose's."""
    url, db_url = dashboard.url, dashboard.db_url
    trained, declared = demo_wiring()
    with dashboard.page({"width": 1440, "height": 900}) as page:
        started = time.perf_counter()
        page.goto(url)
        page.get_by_role("heading", name="SpecLens", exact=True).first.wait_for(timeout=60_000)
        # row 7: measured, not asserted (bench/first_page_bench.py measures it from a server start)
        print(f"first page title after {time.perf_counter() - started:.1f} s (server already up)")
        page.get_by_text("What the bundled toy pair shows").wait_for(timeout=60_000)
        wait_idle(page)
        story = page.get_by_text(re.compile(r"^miswired: the broken one")).first.inner_text()
        assert str(list(trained)) in story and str(list(declared)) in story
        page.screenshot(path=str(SHOTS / "newcomer_1_home.png"), full_page=True)
        try:
            compare_final_with_miswired(page, db_url)
            diagnose_miswired(page, url)
            # row 5: what the probe found is kept in the database, for a server started later
            from backend.defaults import DEMO_TARGET
            from backend.service import kept_results

            assert kept_results.trained_wirings(str(DEMO_TARGET), str(DEMO_DRAFTS / "miswired"), db_url)
            probe_then_lint(
                page, trained, declared, SHOTS / "newcomer_4_probe.png", SHOTS / "newcomer_5_lint.png"
            )
            lint_recommends_one_command(page, SHOTS / "newcomer_5_lint_sglang.png")
            compare_keeps_its_pair(page)
            decode_opens_on_a_telling_reference(page)
        finally:
            page.screenshot(path=str(SHOTS / "newcomer_last.png"), full_page=True)  # where it stopped
