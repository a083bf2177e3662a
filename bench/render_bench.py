"""Decode-page render time for a 200- and a 2,000-token run (the step viewer must stay fast).

For each run length, a real replay of the bundled demo pair (K=4, fp32 CPU) is stored in a temporary
database, then:
  html ms      building the viewer's HTML blocks for one step (context + chips + output window):
               the work a Next/Previous click does inside the fragment (median over 20 steps);
  html KB      size of those blocks (one block each, never one element per token);
  page s       a full Decode page script run under Streamlit's AppTest (first load, incl. charts);
  next s       AppTest: click Next and rerun (AppTest reruns the whole script, so this is an upper
               bound on the fragment rerun a browser sees);
  browser s    (--browser) real Chromium: click "Next ▶" until the page shows the next step's header
               and Streamlit's running indicator is gone (the page has settled), median over 9 clicks
               after one warm-up click.

    python -m bench.render_bench [--browser] [--json bench/results/render.json]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.defaults import DEMO_DRAFTS, DEMO_TARGET  # noqa: E402
from backend.engine.loading import load_target  # noqa: E402
from backend.engine.preflight import load_checked_draft  # noqa: E402
from backend.run.request import ReplayRequest  # noqa: E402
from backend.service.database import open_database  # noqa: E402
from backend.service.jobs import run_plan  # noqa: E402
from backend.service.plan import resolve  # noqa: E402
from backend.service.runs import get_run_with_steps  # noqa: E402
from ui.html import chips_html, context_html, output_html  # noqa: E402
from ui.tokens import Pieces  # noqa: E402

PROMPT = "import os\nimport sys\n\n\ndef main(argv):\n    "


def make_run(url: str, new_tokens: int) -> int:
    target = load_target(str(DEMO_TARGET), device="cpu", dtype="fp32")
    draft, report = load_checked_draft(str(DEMO_DRAFTS / "final"), target)
    prompt = target.tokenizer(PROMPT)["input_ids"]
    request = ReplayRequest(
        str(DEMO_TARGET),
        str(DEMO_DRAFTS / "final"),
        prompt_ids=tuple(prompt),
        num_steps=4,
        max_new_tokens=new_tokens,
        sample_ref="render bench",
    )
    outcome = run_plan(open_database(url), target, draft, resolve(request, target, draft))
    return outcome.run_id


def html_timing(url: str, run_id: int) -> tuple[float, float, int]:
    run, steps = get_run_with_steps(url, run_id)
    pieces = Pieces(run.target_path)
    sequence = run.prompt_ids + run.output_ids
    timings, size = [], 0
    for current in range(0, len(steps), max(1, len(steps) // 20)):
        started = time.perf_counter()
        blocks = (
            context_html(sequence[: steps[current].position + 1], pieces)
            + chips_html(steps[current], pieces)
            + output_html(run.output_ids[0], steps, pieces, current, window=30)
        )
        timings.append(1000 * (time.perf_counter() - started))
        size = max(size, len(blocks))
    return statistics.median(timings), size / 1024, len(run.output_ids)


def apptest_timing(url: str, run_id: int) -> tuple[float, float]:
    from streamlit.testing.v1 import AppTest

    os.environ["SPECLENS_DB_URL"] = url
    app = AppTest.from_file(str(REPO / "pages" / "2_Decode.py"), default_timeout=120)
    app.session_state["global_run_id"] = run_id
    started = time.perf_counter()
    app.run()
    first = time.perf_counter() - started
    assert not app.exception, app.exception
    started = time.perf_counter()
    app.button(key="decode_next").click().run()
    return first, time.perf_counter() - started


def browser_timing(url: str, run_id: int) -> float:
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, streamlit_server

    clicks = []
    with streamlit_server({"SPECLENS_DB_URL": url}) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(f"{server}/Decode")
        page.get_by_text(re.compile(r"^Step 1 of")).wait_for(timeout=120_000)
        page.get_by_role("combobox", name="Run", exact=True).wait_for()
        settled = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
        page.wait_for_function(settled, timeout=60_000)
        for step in range(1, 11):  # the first click warms the fragment up and is not counted
            started = time.perf_counter()
            page.get_by_role("button", name="Next ▶").click()
            page.get_by_text(re.compile(rf"^Step {step + 1} of")).wait_for(timeout=60_000)
            page.wait_for_function(settled, timeout=60_000)  # the fragment's rerun has ended
            if step > 1:
                clicks.append(time.perf_counter() - started)
        browser.close()
    return statistics.median(clicks)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", default="200,2000")
    parser.add_argument("--browser", action="store_true", help="also time clicks in headless Chromium")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for length in [int(x) for x in args.lengths.split(",")]:
        folder = Path(tempfile.mkdtemp(prefix="speclens-render-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        url = f"sqlite:///{folder / 'bench.db'}"
        run_id = make_run(url, length)
        html_ms, html_kb, tokens = html_timing(url, run_id)
        page_s, next_s = apptest_timing(url, run_id)
        browser_s = browser_timing(url, run_id) if args.browser else None
        rows.append(
            {
                "requested_tokens": length,
                "tokens": tokens,
                "html_ms": html_ms,
                "html_kb": html_kb,
                "page_s": page_s,
                "next_s": next_s,
                "browser_next_s": browser_s,
            }
        )
        print(f"done {length}", file=sys.stderr, flush=True)
    print(f"{'tokens':>7} {'html ms':>8} {'html KB':>8} {'page s':>7} {'next s':>7} {'browser s':>10}")
    for r in rows:
        browser = "-" if r["browser_next_s"] is None else f"{r['browser_next_s']:.2f}"
        print(
            f"{r['tokens']:>7} {r['html_ms']:>8.1f} {r['html_kb']:>8.1f} {r['page_s']:>7.2f} {r['next_s']:>7.2f} "
            f"{browser:>10}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
