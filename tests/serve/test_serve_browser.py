"""The web page in a real browser: headless Chromium (Debian's chromium and chromium-driver, through
selenium) opens a server's page, a sentence is typed and sent, and the translation and the attention map
appear; a screenshot is saved. Markup typed in stays text (no element is made of it). Skipped, with the
reason, where Chromium, its driver or selenium is missing; the HTTP tests run everywhere."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving import call, start

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-dev-shm-usage",
         "--window-size=1000,1100")


def chromium_driver(profile: Path) -> Any:
    """A headless Chromium under selenium with a fresh profile in `profile`; pytest.skip saying what is
    missing."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install selenium)")
    browser = next((path for name in CHROMIUM if (path := shutil.which(name))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip("no Chromium here (apt-get install chromium chromium-driver): the browser test is skipped")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    driver = chromium_driver(tmp_path / "profile")
    try:
        yield driver
    finally:
        driver.quit()


def ask(browser: Any, url: str, text: str) -> None:
    """Open the page, type `text` in place of the example, press the button, wait for the attention map."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda b: b.find_element(By.ID, "go").is_enabled())
    box = browser.find_element(By.ID, "text")
    box.clear()
    box.send_keys(text)
    browser.find_element(By.ID, "go").click()
    wait.until(lambda b: b.find_element(By.ID, "attention").get_attribute("data-state") == "drawn"
               or b.find_element(By.ID, "status").get_attribute("class") == "error")


def test_a_sentence_typed_in_gets_its_translation_and_attention_map(browser: Any, checkpoints: dict,
                                                                    tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    sentence = "the big cat sees the small dog"
    with start(checkpoints["seq2seq"]) as url:
        expected = call(url, "POST", "/translate", {"text": sentence})[1]["translation"]
        ask(browser, url, sentence)
        status = browser.find_element(By.ID, "status")
        assert status.get_attribute("class") != "error", status.text
        output = browser.find_element(By.ID, "output").get_attribute("textContent")
        assert output == expected
        assert browser.find_element(By.ID, "go").text == "Translate"
        parts = [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#part option")]
        assert parts[-1].startswith("cross-attention")
        canvas = browser.find_element(By.ID, "attention")
        assert canvas.size["width"] > 100 and canvas.size["height"] > 100
        inked = browser.execute_script(  # pixels of the map that are not the white background
            "const c = document.getElementById('attention'); const d = c.getContext('2d')"
            ".getImageData(0, 0, c.width, c.height).data; let n = 0;"
            "for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i + 2] < 250) n++; return n;")
        assert inked > 1000
        shot = tmp_path / "serve.png"
        assert browser.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_markup_typed_in_stays_text(browser: Any, checkpoints: dict) -> None:
    from selenium.webdriver.common.by import By

    markup = "<b>a</b><img src=x onerror=document.title=1>"  # within the tiny GPT's context of 48
    with start(checkpoints["gpt"], max_new_tokens=8) as url:
        ask(browser, url, markup)
        status = browser.find_element(By.ID, "status")
        assert status.get_attribute("class") != "error", status.text
        assert browser.find_element(By.CSS_SELECTOR, "#output .prompt").get_attribute("textContent") == markup
        assert browser.find_elements(By.CSS_SELECTOR, "main img, main b") == []
        assert browser.title == "tformer serve"
