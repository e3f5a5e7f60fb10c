"""The console in headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by
Selenium): every page loads without a console error, the filters work, a request with a
fallback shows both attempts and why deployments were excluded. A screenshot of each page
goes to ``test-artifacts/console/`` (``SWITCHYARD_TEST_ARTIFACTS`` to move it); with
``SWITCHYARD_UPDATE_DOCS_IMG=1`` the README's copies in ``docs/img/`` are replaced too."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.analytics.load import fold_log
from app.analytics.store import Store
from app.console.server import RunningConsole, start_console
from app.settings import Settings, Topics
from bench.logs.sample import sample_log

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("SWITCHYARD_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "console"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Debian's chromium and chromium-driver (installed by .ci/run)",
)


@pytest.fixture(scope="module")
def store() -> Store:
    filled = Store()
    fold_log(filled, sample_log(600, policy_every=200), Topics())
    return filled


@pytest.fixture(scope="module")
async def console(store: Store) -> AsyncIterator[RunningConsole]:
    running = await start_console(Settings(), store=store, sink=False, host="127.0.0.1", port=0)
    yield running
    await running.runner.cleanup()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="switchyard-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(DRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def a_fallback(store: Store) -> str:
    """A request retried elsewhere whose second decision excluded the first deployment."""
    return str(
        store.query(
            "SELECT request_id FROM decision_exclusions WHERE attempt = 2 "
            "AND reason = 'already_tried' ORDER BY request_id LIMIT 1"
        )[0][0]
    )


def visit(driver: Any, url: str) -> list[dict[str, Any]]:
    """Open ``url``; the console's errors it logged (SEVERE), after any previous page's."""
    driver.get_log("browser")
    driver.get(url)
    assert driver.execute_script("return document.readyState") == "complete"
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


NEXT_PAGE_LOADED = (
    "return window.switchyardOldPage === undefined && document.readyState === 'complete'"
)


def follow(driver: Any, element_id: str) -> None:
    """Click and wait until the next page has replaced this one and finished loading.

    The old page is marked on its ``window``, not held as an element: while Chromium swaps
    documents, asking an old element whether it is stale can fail with "Node with given id
    does not belong to the document" instead of answering stale (a CI run failed so), and
    scripts can fail the same way; the wait polls through both."""
    driver.execute_script("window.switchyardOldPage = true")
    driver.find_element(By.ID, element_id).click()
    WebDriverWait(driver, 10, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(NEXT_PAGE_LOADED)
    )
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []


def shoot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / f"console-{name}.png"
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(int(height) + 140, 1400))  # the whole page, or most
    try:
        assert driver.save_screenshot(str(target))
    finally:
        driver.set_window_size(1280, 900)
    assert target.stat().st_size > 5000
    if os.environ.get("SWITCHYARD_UPDATE_DOCS_IMG") == "1":
        shutil.copy(target, ROOT / "docs" / "img" / target.name)


async def test_every_page_loads_without_console_errors(
    console: RunningConsole, browser: Any, store: Store
) -> None:
    pages = {
        "requests": "requests",
        "request": f"requests/{a_fallback(store)}",
        "providers": "providers",
        "policies": "policies",
    }

    def run() -> None:
        for name, path in pages.items():
            errors = visit(browser, console.url + path)
            assert errors == [], (path, errors)
            assert browser.find_element(By.TAG_NAME, "h1").text
            shoot(browser, name)

    await asyncio_thread(run)


async def test_the_provider_page_draws_share_and_breaker_plots(
    console: RunningConsole, browser: Any
) -> None:
    def run() -> None:
        assert visit(browser, console.url + "providers") == []
        charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
        assert len(charts) == 2
        assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart polygon")) == 4
        lanes = browser.find_elements(By.CSS_SELECTOR, 'svg.chart rect[fill="#e15759"]')
        assert lanes, "the flaky deployment's breaker was seen open"

    await asyncio_thread(run)


async def test_filters_narrow_the_log(console: RunningConsole, browser: Any, store: Store) -> None:
    def count() -> int:
        return int(browser.find_element(By.ID, "count").get_attribute("data-total"))

    def column(index: int) -> list[str]:
        cells = browser.find_elements(By.CSS_SELECTOR, f"table.log tbody td:nth-child({index})")
        return [cell.text for cell in cells]

    def run() -> None:
        assert visit(browser, console.url + "requests") == []
        total = count()
        assert total == 600
        Select(browser.find_element(By.ID, "f-tenant")).select_by_value("acme")
        follow(browser, "apply")
        acme = store.query("SELECT count(*) FROM request_log WHERE tenant = 'acme'")[0][0]
        assert count() == acme < total and set(column(4)) == {"acme"}

        Select(browser.find_element(By.ID, "f-status")).select_by_value("error")
        follow(browser, "apply")
        errors = store.query(
            "SELECT count(*) FROM request_log WHERE tenant = 'acme' AND status = 'error'"
        )[0][0]
        assert count() == errors > 0 and set(column(5)) == {"error"}

        assert visit(browser, console.url + "requests?deployment=flaky-d%3Am1") == []
        flaky = store.query(
            "SELECT count(*) FROM request_log WHERE list_contains(deployments, 'flaky-d:m1')"
        )[0][0]
        assert count() == flaky > 0

        assert visit(browser, console.url + "requests") == []
        follow(browser, "page-next")
        assert "page 2 of 12" in browser.find_element(By.CSS_SELECTOR, "nav.pager").text
        first_of_page_two = column(1)[0]
        newest = store.query(
            "SELECT request_id FROM request_log ORDER BY accepted_at DESC, request_id "
            "LIMIT 1 OFFSET 50"
        )[0][0]
        assert first_of_page_two == newest

        window = store.query(
            "SELECT strftime(min(accepted_at) + INTERVAL 5 SECOND, '%Y-%m-%dT%H:%M:%S'), "
            "strftime(min(accepted_at) + INTERVAL 10 SECOND, '%Y-%m-%dT%H:%M:%S') FROM request_log"
        )[0]
        assert visit(browser, console.url + f"requests?since={window[0]}&until={window[1]}") == []
        assert count() == 101  # a request every 50 ms over 5 s, both ends included

    await asyncio_thread(run)


async def test_a_fallback_shows_both_attempts_and_the_exclusions(
    console: RunningConsole, browser: Any, store: Store
) -> None:
    request_id = a_fallback(store)
    first = store.query(
        "SELECT deployment FROM decisions WHERE request_id = ? AND attempt = 1", [request_id]
    )[0][0]

    def run() -> None:
        assert visit(browser, console.url + f"requests/{request_id}") == []
        attempts = browser.find_elements(By.CSS_SELECTOR, "section.attempt")
        assert [a.get_attribute("id") for a in attempts] == ["attempt-1", "attempt-2"]
        second = attempts[1].find_element(By.CSS_SELECTOR, "table.excluded").text
        assert first in second and "already_tried" in second
        assert "already tried by an earlier attempt of this request" in second
        bars = attempts[0].find_elements(By.CSS_SELECTOR, "table.candidates svg.bar")
        assert (
            bars and "chosen" in attempts[0].find_element(By.CSS_SELECTOR, "table.candidates").text
        )
        assert "ended the request\nno: retried" in attempts[0].text
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "synthetic prompt" not in body and "synthetic answer" not in body
        assert "Response" in body

    await asyncio_thread(run)


async def asyncio_thread(run: Any) -> None:
    """Selenium blocks: drive it from a thread while the console serves on this loop."""
    await asyncio.to_thread(run)
