"""The built-in chat page in headless Chromium: ask a question, see a streamed answer and a citation."""

from __future__ import annotations

import shutil

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture
def browser(tmp_path):
    if not (CHROMIUM and DRIVER):
        pytest.fail("Debian's chromium and chromium-driver are needed (.ci/run installs them)")
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-quic", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


def test_page_streams_an_answer_with_citations(server, browser, tmp_path):
    browser.get(server.url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: "on cpu" in d.find_element(By.ID, "status").text)
    assert "chunks" in browser.find_element(By.ID, "status").text

    browser.find_element(By.ID, "question").send_keys("The little tyre symbol on my dashboard is orange, what now?")
    browser.find_element(By.ID, "send").click()
    answer = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant"))[0]
    wait.until(lambda d: answer.find_elements(By.CSS_SELECTOR, ".citations li"))
    wait.until(lambda d: d.find_element(By.ID, "send").is_enabled())  # the stream has ended
    citations = [li.text for li in answer.find_elements(By.CSS_SELECTOR, ".citations li")]
    assert citations[0].startswith("[1] aurora_faq")
    assert answer.find_element(By.TAG_NAME, "span").text.strip()  # streamed text arrived
    assert browser.find_elements(By.CSS_SELECTOR, ".msg.user")[0].text.startswith("The little tyre symbol")
    browser.save_screenshot(str(tmp_path / "chat.png"))


def test_page_uploads_a_document(server, browser, tmp_path):
    """The page's own origin passes the same-origin guard; it follows the ingest job to the end."""
    doc = tmp_path / "page_upload_notes.md"
    doc.write_text("# Roof box\n\nThe roof box holds at most 75 kg.\n")
    browser.get(server.url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: "on cpu" in d.find_element(By.ID, "status").text)
    browser.find_element(By.ID, "file").send_keys(str(doc))
    browser.find_element(By.ID, "upload-button").click()
    wait.until(lambda d: d.find_element(By.ID, "upload-status").text.startswith(("added", "upload failed")))
    assert browser.find_element(By.ID, "upload-status").text == "added 1, updated 0, unchanged 0"
    docs = httpx.get(server.url + "/v1/knowledge/documents").json()["data"]
    (source,) = [d["source"] for d in docs if d["name"] == doc.name]
    assert httpx.request("DELETE", server.url + "/v1/knowledge/documents", params={"source": source}).status_code == 200
