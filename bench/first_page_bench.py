"""Time from a server start to the first page a person sees (issue 43 row 7), measured in Chromium.

    python -m bench.first_page_bench [--runs 3] [--page ""|Decode|Diagnostics]

Each run starts `streamlit run app.py` afresh (a new interpreter: nothing imported, no model loaded),
opens the page in headless Chromium (/usr/bin/chromium) and records:
  served s    server start -> the server answers the page's URL (Streamlit's own start-up);
  title s     server start -> the page's title is on screen;
  story s     server start -> Home's story of the bundled pair is on screen (Home only: it reads
              both bundled drafts as the engines read them);
  idle s      server start -> Streamlit's running indicator has gone (the page finished its script);
  torch       whether the server process had imported torch when the title showed (read from its
              /proc maps: a loaded libtorch shows there).
Printed as a table; compare runs within one invocation (this machine is noisy).
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TITLES = {"": "SpecLens", "Decode": "Decode", "Diagnostics": "Diagnostics", "Samples": "Samples"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_loaded(pid: int) -> bool:
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def one_run(page_name: str, browser) -> dict:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECLENS_")}
    folder = tempfile.mkdtemp(prefix="first_page_bench_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    env["SPECLENS_DB_URL"] = f"sqlite:///{folder}/bench.db"
    started = time.perf_counter()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.headless",
            "true",
            "--server.port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        url = f"http://127.0.0.1:{port}/{page_name}"
        while True:
            try:
                page.goto(url, timeout=5_000)
                served = time.perf_counter() - started
                break
            except Exception:  # the server is not listening yet (re-raised after 120 s)
                if time.perf_counter() - started > 120:
                    raise
                time.sleep(0.2)
        page.get_by_role("heading", name=TITLES[page_name], exact=True).first.wait_for(timeout=120_000)
        title = time.perf_counter() - started
        torch = torch_loaded(server.pid)
        story = None
        if page_name == "":
            page.get_by_text(re.compile(r"^What the bundled .* pair shows")).first.wait_for(timeout=120_000)
            story = time.perf_counter() - started
        page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=120_000)
        idle = time.perf_counter() - started
        page.close()
        return {"served_s": served, "title_s": title, "story_s": story, "idle_s": idle, "torch": torch}
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--page", default="", choices=sorted(TITLES))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium")
        results = [one_run(args.page, browser) for _ in range(args.runs)]
        browser.close()
    print(f"first page: /{args.page} ({args.runs} fresh server starts)")
    columns = ("served_s", "title_s", "story_s", "idle_s")
    print(f"{'run':>4} " + " ".join(f"{c.replace('_s', ' s'):>8}" for c in columns) + "  torch at title")
    cell = lambda v: f"{v:>8.2f}" if v is not None else f"{'—':>8}"  # noqa: E731
    for number, r in enumerate(results, 1):
        print(f"{number:>4} " + " ".join(cell(r[c]) for c in columns) + f"  {r['torch']}")
    medians = [[r[c] for r in results if r[c] is not None] for c in columns]
    print(f"{'med':>4} " + " ".join(cell(statistics.median(m) if m else None) for m in medians))


if __name__ == "__main__":
    main()
