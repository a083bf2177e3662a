"""Time from a server start to the first page a person sees (issue 43 row 7), measured in Chromium.

    python -m bench.first_page_bench [--runs 3] [--page ""|Decode|Diagnostics]

Each run starts `streamlit run app.py` afresh (a new interpreter: nothing imported, no model loaded),
opens the page in headless Chromium (/usr/bin/chromium) and records:
  title s     server start -> the page's title is on screen;
  idle s      server start -> Streamlit's running indicator has gone (the page finished its script);
  torch       whether the server process had imported torch when the title showed (read from its
              /proc maps: a loaded libtorch shows there).
Printed as a table; compare runs within one invocation (this machine is noisy).
"""

from __future__ import annotations

import argparse
import os
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
    env["SPECLENS_DB_URL"] = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
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
                break
            except Exception:  # the server is not listening yet (re-raised after 120 s)
                if time.perf_counter() - started > 120:
                    raise
                time.sleep(0.2)
        page.get_by_role("heading", name=TITLES[page_name], exact=True).first.wait_for(timeout=120_000)
        title = time.perf_counter() - started
        torch = torch_loaded(server.pid)
        page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=120_000)
        idle = time.perf_counter() - started
        page.close()
        return {"title_s": title, "idle_s": idle, "torch": torch}
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
    print(f"{'run':>4} {'title s':>8} {'idle s':>8}  torch at title")
    for number, r in enumerate(results, 1):
        print(f"{number:>4} {r['title_s']:>8.2f} {r['idle_s']:>8.2f}  {r['torch']}")
    print(
        f"{'med':>4} {statistics.median(r['title_s'] for r in results):>8.2f} "
        f"{statistics.median(r['idle_s'] for r in results):>8.2f}"
    )


if __name__ == "__main__":
    main()
