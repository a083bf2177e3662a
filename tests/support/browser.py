"""A real Streamlit server on a free localhost port and headless Debian Chromium driven by Playwright."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = REPO / "tests" / "artifacts" / "browser"
BROWSER_MARKS = [  # every browser walk: slow, and skipped only where Chromium cannot be installed
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("SPECLENS_SKIP_BROWSER") == "1",
        reason="SPECLENS_SKIP_BROWSER=1 (set only where Chromium cannot be installed)",
    ),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def streamlit_server(env: dict):
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(REPO / "app.py"),
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]
    log = open(env.get("SPECLENS_SERVER_LOG", os.devnull), "w")  # closed below
    process = subprocess.Popen(
        command, cwd=REPO, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"streamlit did not start (exit {process.poll()})")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@dataclass
class Dashboard:
    """One Streamlit server with its own SQLite database and one headless Chromium, shared by every
    browser walk of a test session (each walk opens its own page, a new Streamlit session)."""

    url: str
    db_url: str
    browser: object

    @contextmanager
    def page(self, viewport: dict):
        """A new page of `viewport` size, closed when the walk ends."""
        page = self.browser.new_page(viewport=viewport)
        try:
            yield page
        finally:
            page.close()


@contextmanager
def dashboard(root: Path):
    """The dashboard served on a fresh database under `root`, with Chromium; when it stops, its server
    log must hold no complaint (a traceback, a dead thread)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), (
        "Debian chromium is missing: tests/run.sh installs it (apt-get install chromium)"
    )
    SHOTS.mkdir(parents=True, exist_ok=True)
    env = {"SPECLENS_DB_URL": f"sqlite:///{root / 'dashboard.db'}", "SPECLENS_SERVER_LOG": str(root / "log")}
    with streamlit_server(env) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield Dashboard(url, env["SPECLENS_DB_URL"], browser)
        finally:
            browser.close()
    complaints = server_complaints(Path(env["SPECLENS_SERVER_LOG"]).read_text(errors="replace"))
    assert not complaints, f"the server log has {complaints}"


COMPLAINTS = ("Traceback", "Exception in thread", "was created with a default value but also")


def server_complaints(log: str) -> list[str]:
    """The lines of a Streamlit server log that say something went wrong (a traceback, a thread that
    died, a widget given both an index and state)."""
    return [line.strip() for line in log.splitlines() if any(c in line for c in COMPLAINTS)]


def wait_idle(page, timeout=120_000):
    """Until Streamlit finished rerunning (its status widget gone)."""
    page.wait_for_timeout(400)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout
    )


def press_until(page, button: str, text: str, timeout: int = 60_000) -> None:
    """Click `button` until `text` shows (twice at most): a click that lands while the page is still
    rerunning from the previous widget change can be dropped by Streamlit (seen on the lint tab after
    switching the engine radio, in one run of three)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(2):
        wait_idle(page)
        page.get_by_role("button", name=button, exact=True).click()
        try:
            page.get_by_text(text).first.wait_for(timeout=timeout // 2)
            return
        except PlaywrightTimeout:
            if attempt:
                raise


def selected(page, label: str) -> str:
    """The option a select box labelled exactly `label` shows (the value of its combobox input)."""
    return page.get_by_role("combobox", name=label, exact=True).first.input_value()


def open_expander(page, title: str) -> None:
    """Open a Streamlit expander (a <details>) unless it is open already: a click would close it."""
    summary = page.locator("summary").filter(has_text=title).first
    if summary.locator("xpath=..").get_attribute("open") is None:
        summary.click()
    page.wait_for_timeout(300)


def probe_then_lint(page, trained, declared, probe_shot: Path, lint_shot: Path) -> None:
    """On Diagnostics with the mis-wired draft active: the wiring probe names the trained wiring (its
    best, or among the wirings it cannot tell from the best), and the vLLM lint's fix then writes a
    wiring the probe named, never the declared one."""
    import re

    page.get_by_role("tab", name="Wiring probe").click()
    page.get_by_role("button", name="Run the probe").click()
    # the verdict above the tabs says the same words: wait for this probe's progress bar to come and go
    # (CI once read the verdict's text while the probe still ran, and its config block landed later)
    progress = page.locator('[data-testid="stProgress"]').first
    progress.wait_for(timeout=60_000)
    progress.wait_for(state="detached", timeout=300_000)
    wait_idle(page)
    found = page.get_by_text(re.compile("^The draft was (trained on HF|not trained on the declared)")).last
    probe_text = found.inner_text()
    assert str(list(trained)) in probe_text
    named = set(re.findall(r"HF (\[\d+, \d+, \d+\])", probe_text)) - {str(list(declared))}
    wait_idle(page)
    page.screenshot(path=str(probe_shot), full_page=True)
    page.get_by_role("tab", name="Serving-flag lint").click()
    page.locator('[data-testid="stRadio"]').get_by_text("vLLM", exact=True).first.click()
    press_until(page, "Lint", "aux-ids-not-trained")
    wait_idle(page)
    findings = [t for t in page.locator('[data-testid="stAlert"]').all_inner_texts() if "Fix:" in t]
    assert findings and all(str(list(declared)) not in t.split("Fix:")[1] for t in findings), findings
    assert any(w in t.split("Fix:")[1] for t in findings for w in named)
    page.screenshot(path=str(lint_shot), full_page=True)
