"""The explorer page and sweep browser in a real headless Chromium (Debian's chromium and
chromium-driver through selenium), against `serve.py experiment=demo` run as the README runs
it after `make demo`, on the demo's cache and sweep. Screenshots (the whole page) go to the
test's tmp dir (`DENSEX_SCREENSHOT_DIR` copies them elsewhere, e.g. for docs/). Without
chromium the test skips, except under CI=true, where `scripts/install_browser.sh` has
installed it and its absence fails the run."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers.env import subprocess_env

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
QUESTION = "In what year did Kessingbury receive its royal charter?"
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1500,1100")  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(repo_root, demo_sweep, tmp_path_factory):
    """`serve.py` over the demo's three granularities and its sweep, on a free loopback port."""
    sweep, cache = demo_sweep
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    cmd = [sys.executable, str(repo_root / "serve.py"), "experiment=demo", "trainer=cpu",
           f"paths.cache_dir={cache}", f"serve.port={port}", f"serve.sweep_dir={sweep}",
           f"hydra.run.dir={log.parent}"]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=repo_root, env=subprocess_env(), stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600  # a loaded 2-core machine needs minutes
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=2).read()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert proc.poll() is None, (
                    f"serve.py exited {proc.returncode}:\n{log.read_text()[-4000:]}"
                )
                assert time.monotonic() < deadline, f"serve.py not up:\n{log.read_text()[-4000:]}"
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        if os.environ.get("CI") == "true":
            pytest.fail("chromium/chromedriver missing under CI: run scripts/install_browser.sh")
        pytest.skip(
            "no /usr/bin/chromium + chromedriver (scripts/install_browser.sh installs them)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def _until(driver, ready, timeout: float = 60.0):
    """`ready(driver)`'s first truthy value, polled until the page that a click or a select
    navigated to has rendered (a find right after the click may still see the old page)."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(ready)


def _shot(driver, tmp_path: Path, name: str) -> Path:
    """The whole page (the window grown to the document's height) as a PNG."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1500, min(max(int(height) + 40, 700), 6000))
    path = tmp_path / name
    driver.save_screenshot(str(path))
    driver.set_window_size(1500, 1100)
    assert path.stat().st_size > 10_000
    if os.environ.get("DENSEX_SCREENSHOT_DIR"):
        shutil.copy(path, Path(os.environ["DENSEX_SCREENSHOT_DIR"]) / name)
    return path


def test_landing_page_names_the_demo_and_offers_its_questions(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(server + "/")
    served = browser.find_element(By.ID, "served").text
    for text in ("Corpus demo (51 passages)", "retriever minilm", "472 proposition units",
                 "benchmark questions demo (150)"):  # fmt: skip
        assert text in served, served
    examples = browser.find_elements(By.CSS_SELECTOR, "#examples a.example")
    assert len(examples) == 5
    assert not browser.find_elements(By.ID, "problem")  # the demo's own questions
    _shot(browser, tmp_path, "landing.png")
    question = examples[0].text
    examples[0].click()
    _until(browser, lambda d: d.find_elements(By.ID, "table4"))
    assert browser.find_element(By.NAME, "q").get_attribute("value") == question
    assert browser.find_elements(By.CSS_SELECTOR, "#answers u.answer")  # a benchmark question


def test_explorer_results_view_is_table_4(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(server + "/")
    box = browser.find_element(By.NAME, "q")
    box.send_keys(QUESTION)
    browser.find_element(By.ID, "go").click()
    columns = _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "section.column"))
    assert [c.get_attribute("data-granularity") for c in columns] == [
        "passage",
        "sentence",
        "proposition",
    ]
    # the passage column paints nothing (the unit is the passage); the others one unit, in place
    assert not columns[0].find_elements(By.CSS_SELECTOR, "mark")
    for column in columns[1:]:
        first = column.find_element(By.CSS_SELECTOR, "article.hit p.passage")
        (mark,) = first.find_elements(By.CSS_SELECTOR, "mark.unit")
        assert mark.text and mark.text in first.text and mark.text != first.text
    prop = columns[2].find_element(By.CSS_SELECTOR, "article.hit")
    assert "1312" in prop.find_element(By.CSS_SELECTOR, "mark.unit").text
    assert prop.find_element(By.CSS_SELECTOR, "u.answer").text == "1312"  # a benchmark question
    table4 = browser.find_elements(By.CSS_SELECTOR, "#table4 tr[data-granularity]")
    assert [r.get_attribute("data-granularity") for r in table4] == [
        "passage",
        "sentence",
        "proposition",
    ]
    assert not table4[0].find_elements(By.CSS_SELECTOR, "mark, .context")  # the whole passage
    own = table4[2].find_element(By.CSS_SELECTOR, "td.unit-text").text
    in_place = table4[2].find_element(By.CSS_SELECTOR, "td.in-place")
    assert "Kessingbury" in own and "1312" in own  # the proposition's own text ...
    assert "1312" in in_place.find_element(By.CSS_SELECTOR, "mark.unit").text  # ... and its span
    assert in_place.find_elements(By.CSS_SELECTOR, ".context")  # the rest greyed as context
    ranks = [r.find_element(By.CSS_SELECTOR, "td.rank").text for r in table4]
    assert ranks[2] == "1" and all(r.isdigit() or r.startswith("not in top") for r in ranks)
    assert "not comparable" in browser.find_element(By.ID, "score-note").text
    _shot(browser, tmp_path, "explorer.png")


def test_docs_page_renders_offline(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(server + "/docs")
    titles = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "section.endpoint h3")]
    assert any(t.startswith("GET /search") for t in titles)
    assert any(t.startswith("POST /search") for t in titles)
    assert (
        browser.find_element(By.ID, "openapi-link").get_attribute("href").endswith("/openapi.json")
    )
    _shot(browser, tmp_path, "docs.png")


def test_sweep_browser_filters_and_opens_a_question(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(server + "/sweep")
    assert browser.find_element(By.ID, "table2").text.count("\n") >= 3  # header + 3 cells
    assert browser.find_element(By.ID, "plot").get_attribute("naturalWidth") != "0"
    all_count = browser.find_element(By.ID, "count").text
    for name, value in (("found", "proposition"), ("missed", "passage"), ("k", "1")):
        Select(browser.find_element(By.ID, name)).select_by_value(value)  # each one submits
        _until(
            browser, lambda d, n=name, v=value: d.find_element(By.ID, n).get_attribute("value") == v
        )
    wanted = "found by proposition, missed by passage in the top 1"
    count = _until(browser, lambda d: wanted in (t := d.find_element(By.ID, "count").text) and t)
    assert count != all_count
    rows = browser.find_elements(By.CSS_SELECTOR, "#questions a.open-question")
    assert rows, count
    _shot(browser, tmp_path, "sweep.png")
    question = rows[0].text
    rows[0].click()
    _until(browser, lambda d: d.find_elements(By.ID, "question-info"))
    assert browser.find_element(By.NAME, "q").get_attribute("value") == question
    info = browser.find_element(By.ID, "question-info").text
    assert "passage" in info and "proposition 1" in info
    assert len(browser.find_elements(By.CSS_SELECTOR, "section.column")) == 3
    assert browser.find_elements(By.CSS_SELECTOR, "#table4 u.answer")
    _shot(browser, tmp_path, "question.png")


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp{,6} give them) listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            for line in Path(table).read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    found.append(local.rsplit(":", 1)[0])
    return found


def test_service_is_loopback_only_and_refuses_a_100kb_url(server):
    port = int(server.rsplit(":", 1)[1])
    assert _listening(port) == ["0100007F"]  # 127.0.0.1 only: serve.host's default
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /search?q=" + b"x" * 100_000 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
        status = s.recv(100).split(b"\r\n")[0]
    assert status.split()[1].startswith(b"4"), status
    assert urllib.request.urlopen(server + "/healthz", timeout=10).status == 200
