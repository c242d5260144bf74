"""The UI in a real browser: headless Chromium (Debian's chromium and
chromium-driver, `make browser`) drives the real dagster-webserver on a
persistent Dagster instance holding the session's small round (conftest's
finished_round), and each test asserts on what the page shows. Full-page screenshots go
to $CLAWLOOP_TEST_ARTIFACTS (default test-artifacts/) for a person to look at."""

import base64
import os
import struct
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait
from webserver_process import REPO, Webserver

from clawloop_assets.definitions import round_assets
from clawloop_assets.reporting.lineage import LEVEL_ASSETS, PHASE_ASSETS, asset_url
from resources.warehouse import DuckDBWarehouse

pytestmark = pytest.mark.slow

ROUND = "round-0001"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("CLAWLOOP_TEST_ARTIFACTS") or REPO / "test-artifacts")
WINDOW = (1600, 1200)
ROUND_ASSETS = sorted(key.path[-1] for assets in round_assets for key in assets.keys)
PAGE_WAIT = 120  # seconds: the UI's queries on a loaded 2-core machine


@pytest.fixture(scope="module")
def ui(finished_round_once, tmp_path_factory):
    """(webserver, the round's diagnosis_patterns rows): the session's small
    round (conftest.finished_round) and the webserver on its instance."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in finished_round_once.environment().items():
            env.setenv(key, value)
        patterns = DuckDBWarehouse().read("diagnosis_patterns", {"round": ROUND})
        log = tmp_path_factory.mktemp("ui") / "webserver.log"
        with Webserver(finished_round_once.dagster_home, log) as server:
            # A fresh instance greets its first visitor with a sign-up dialog
            # over the page (a person clicks Skip); mark it seen.
            assert server.graphql("mutation { setNuxSeen }")["data"]["setNuxSeen"]
            yield server, patterns


@pytest.fixture(scope="module")
def browser():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run `make browser` (Debian chromium, chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # --no-sandbox: Chromium's own sandbox refuses to start as root (CI containers).
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size={},{}".format(*WINDOW)):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, what: str):
    return WebDriverWait(driver, PAGE_WAIT).until(condition, f"waited {PAGE_WAIT} s for {what} on {driver.current_url}")


def text_xpath(text: str) -> str:
    return f"//*[normalize-space(text())='{text}']"


def shown(driver, text: str, within: str = ""):
    """The first displayed element whose own text is `text`, waited for."""
    locator = (By.XPATH, within + text_xpath(text))
    return wait(driver, lambda d: next((e for e in d.find_elements(*locator) if e.is_displayed()), False), repr(text))


def metadata_markdown(driver, label: str):
    """Open a markdown metadata entry's dialog ([Show Markdown]) and return the dialog."""
    row = f"//tr[td[normalize-space()='{label}']]"
    wait(driver, EC.element_to_be_clickable((By.XPATH, f"{row}//a[normalize-space()='[Show Markdown]']")),
         f"the {label} metadata").click()
    return wait(driver, EC.visibility_of_element_located(
        (By.XPATH, f"//div[@role='dialog'][.//*[normalize-space(text())='{label}']]")), f"the {label} dialog")


def close_dialog(driver, dialog) -> None:
    dialog.find_element(By.XPATH, ".//button[normalize-space()='Close' or normalize-space()='OK']").click()
    wait(driver, EC.invisibility_of_element(dialog), "the dialog to close")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def screenshot(driver, name: str) -> Path:
    """A full-page PNG in the artifacts folder. The UI lays itself out in the
    viewport (its panes scroll inside it), so the page is the viewport; a
    document taller than that is captured beyond the viewport."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    if size["height"] <= driver.execute_script("return window.innerHeight") + 1:
        data = driver.get_screenshot_as_png()
    else:  # resizing the viewport makes the UI's virtualized lists re-render: only where needed
        data = base64.b64decode(driver.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})["data"])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    path.write_bytes(data)
    width, height = png_size(path.read_bytes())
    assert width >= WINDOW[0] * 0.9 and height >= WINDOW[1] * 0.5, (path, width, height)
    # A blank page of this size compresses to a few KB; a rendered UI page is far larger.
    assert path.stat().st_size > 30_000, (path, path.stat().st_size)
    return path


def test_the_asset_graph_shows_the_rounds_assets_materialized(ui, browser):
    server, _ = ui
    browser.get(f"{server.url}/locations/clawloop/asset-groups/diagnosis")
    for asset in ("heldout_baseline_rollouts", "diagnosis_rollouts", "diagnosis_report", "round_summary"):
        shown(browser, asset)
    # Each node's partition status: this round's partition materialized.
    wait(browser, lambda d: len([e for e in d.find_elements(By.XPATH, text_xpath("100% filled"))
                                 if e.is_displayed()]) >= 4, "the four nodes' partitions 100% filled")
    screenshot(browser, "asset-graph-diagnosis.png")
    # The whole round in the catalog: every asset of the round.
    browser.get(f"{server.url}/assets")
    for asset in ROUND_ASSETS:
        shown(browser, asset)
    screenshot(browser, "asset-catalog.png")


def test_the_diagnosis_report_page_shows_the_report_and_each_patterns_lineage_links(ui, browser):
    server, patterns = ui
    assert patterns.height >= 1  # a 135M policy fails plenty: a round without patterns is itself a finding
    browser.get(server.url + asset_url("diagnosis_report", ROUND))
    shown(browser, "Materialized")
    for label in ("report_id", "failures", "patterns", "report", "lineage"):
        shown(browser, label, within="//tr/td")
    shown(browser, f"{ROUND}.diagnosis_report")
    report = metadata_markdown(browser, "report")
    wait(browser, lambda d: f"Diagnosis report, {ROUND}" in report.text, "the report's heading")
    screenshot(browser, "diagnosis-report.png")
    close_dialog(browser, report)

    lineage = metadata_markdown(browser, "lineage")
    rows = wait(browser, lambda d: lineage.find_elements(By.XPATH, ".//table/tbody/tr"), "the lineage table")
    assert len(rows) == patterns.height
    first_cells = [row.find_element(By.XPATH, "./td[1]").text for row in rows]
    assert sorted(first_cells) == sorted(patterns["pattern_id"])
    expected = {asset_url(asset, ROUND) for assets in LEVEL_ASSETS.values() for asset in assets}
    for row, pattern_id in zip(rows, first_cells):
        links = {a.get_attribute("href").removeprefix(server.url): a.text for a in row.find_elements(By.TAG_NAME, "a")}
        assert expected <= set(links), (pattern_id, links)
        rollout_links = set(links) - expected
        assert rollout_links and rollout_links <= {asset_url(a, ROUND) for a in PHASE_ASSETS.values()}, links
        assert all(links[url] in url for url in links)  # each link reads as the asset it opens
        assert row.find_element(By.TAG_NAME, "code").text == f"clawloop lineage {pattern_id}"
    browser.execute_script("arguments[0].scrollIntoView()", lineage.find_element(By.TAG_NAME, "table"))
    screenshot(browser, "diagnosis-lineage.png")

    # A pattern's trajectories link opens that asset's page at this round.
    link = rows[0].find_element(By.XPATH, "./td[4]//a")
    target = link.get_attribute("href")
    link.click()
    wait(browser, EC.url_to_be(target), "the trajectories' asset page")
    asset = target.removeprefix(server.url).split("?")[0].removeprefix("/assets/")
    assert asset in {"validation_rollouts", "diagnosis_rollouts"}, target
    shown(browser, "Materialized")
    for label in ("policy_checkpoint_id", "rollouts", "pass_rate"):
        shown(browser, label, within="//tr/td")
    screenshot(browser, "lineage-link-target.png")


def test_the_readme_clicks_lead_from_the_graph_to_the_rounds_report(ui, browser):
    """The path docs/ui.md ("The UI, click by click") describes."""
    server, _ = ui
    browser.get(f"{server.url}/locations/clawloop/asset-groups/diagnosis")
    shown(browser, "diagnosis_report").click()
    wait(browser, EC.element_to_be_clickable((By.XPATH, "//a[normalize-space()='View in Asset Catalog']")),
         "the asset's side panel").click()
    wait(browser, EC.url_contains("/assets/diagnosis_report"), "the asset page")
    wait(browser, EC.element_to_be_clickable((By.XPATH, "//a[normalize-space()='Partitions']")), "Partitions").click()
    shown(browser, ROUND).click()
    wait(browser, EC.url_contains(f"partition={ROUND}"), "the round's partition")
    lineage = metadata_markdown(browser, "lineage")
    assert "clawloop lineage" in lineage.text
