"""The web page in a real browser: headless Chromium (Debian's chromium and chromium-driver, through
selenium) opens a server's page, a sentence is typed and sent, and the translation and the attention map
appear; a screenshot is saved. A 70-word sentence's map scrolls, its labels are thinned so that none overlap,
pointing at a cell reads out its weight, and a colour scale stands beside it; an error clears the map. A GPT's
page speaks of prompts and maps the continuation too. Markup typed in stays text (no element is made of it).
Picking a row fades the others and writes its largest weights under the map.
Skipped, with the reason, where Chromium, its driver or selenium is missing; the HTTP tests run everywhere."""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving import TINY, WIDE, WORDS, call, start

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-dev-shm-usage",
         "--window-size=1000,1100")
LONG = " ".join(random.Random(7).choices(WORDS, k=70))  # 70 words: 70 or so tokens of the tests' BPE


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


@pytest.fixture(scope="module")
def long_translator(checkpoints: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A translator as the session's, with its tokenizer, but a context of 160 tokens: a 70-word sentence and
    its translation fit (the session's tiny models stop at 48). Greedy, at most 39 target tokens, which
    the untrained model's pieces turn into a text of a few times as many tokens when it is read again."""
    import torch
    import yaml

    import tformer
    from tformer.inference import load
    from tformer.training.checkpoint import save_checkpoint

    tokenizer = load(checkpoints["seq2seq"]).tokenizer
    torch.manual_seed(0)
    ids = dict(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id,
               eos_id=tokenizer.eos_id)
    config = tformer.preset("transformer-tiny", {**TINY, "max_len": 192, **ids, "init": WIDE})
    run = tmp_path_factory.mktemp("long") / "mt"
    save_checkpoint(run / "best", model=tformer.build_model(config), config=config, tokenizer=tokenizer)
    recipe = {"task": "translation", "out_dir": str(run), "data": {"corpus": "bible"},
              "decode": {"beam": 1, "max_len_a": 0.5, "max_len_b": 4}}
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return run / "best"


def ask(browser: Any, url: str, text: str) -> None:
    """Open the page, type `text` in place of the example, press the button, wait for the attention map."""
    open_page(browser, url)
    press(browser, text)


def open_page(browser: Any, url: str) -> None:
    """Open the server's page and wait until it has read /info (its button is enabled then)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url + "/")
    WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "go").is_enabled())


def press(browser: Any, text: str) -> None:
    """Type `text` in place of what the box holds, press the button, wait for the map or an error."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    box = browser.find_element(By.ID, "text")
    box.clear()
    box.send_keys(text)
    browser.find_element(By.ID, "go").click()
    WebDriverWait(browser, 60).until(
        lambda b: b.find_element(By.ID, "go").is_enabled()
        and (b.find_element(By.ID, "attention").get_attribute("data-state") == "drawn"
             or b.find_element(By.ID, "status").get_attribute("class") == "error"))


def no_error(browser: Any) -> None:
    from selenium.webdriver.common.by import By

    status = browser.find_element(By.ID, "status")
    assert status.get_attribute("class") != "error", status.text


def screenshot(browser: Any, path: Path) -> None:
    assert browser.save_screenshot(str(path))
    print(f"screenshot: {path}")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


# Where the map's labels and cells are on the page (CSS pixels, the viewport's coordinates), and the sizes of
# the box that scrolls them. Hidden labels (thinned out) are listed with shown: false.
GEOMETRY = """
const box = (e) => { const r = e.getBoundingClientRect();
                     return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
const spans = (id) => [...document.getElementById(id).children].map((s) => ({...box(s), shown: !s.hidden,
                                                                           title: s.title}));
const scroll = document.getElementById("map-scroll");
return {keys: spans("key-labels"), queries: spans("query-labels"),
        cells: box(document.getElementById("attention")),
        scroll: {width: scroll.scrollWidth, seen: scroll.clientWidth}};
"""
# A fetch that refuses a map of a translation (as a server would a target too long for its context).
REFUSE_TARGET = """
const real = window.fetch;
window.fetch = (path, init) => String(path).endsWith("/attention") && "target" in JSON.parse(init.body)
  ? Promise.resolve(new Response(JSON.stringify({error: "target is 300 tokens; this server takes at most 47"}),
                                 {status: 422, headers: {"Content-Type": "application/json"}}))
  : real(path, init);
"""
# A fetch that adds a warning to every /translate answer: the server's answers may carry such a list.
WARN = """
const real = window.fetch;
window.fetch = async (...args) => {
  const response = await real(...args);
  if (!String(args[0]).endsWith("/translate")) return response;
  const answer = await response.json();
  return new Response(JSON.stringify({...answer, warnings: ["2 tokens are unknown to the model"]}),
                      {status: response.status, headers: response.headers});
};
"""


def overlap(a: dict, b: dict) -> bool:
    """Whether two boxes share more than half a pixel each way (rounding of subpixel layout aside)."""
    return (min(a["right"], b["right"]) - max(a["left"], b["left"]) > 0.5
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 0.5)


def test_a_sentence_typed_in_gets_its_translation_and_attention_map(browser: Any, checkpoints: dict,
                                                                    tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    sentence = "the big cat sees the small dog"
    with start(checkpoints["seq2seq"]) as url:
        expected = call(url, "POST", "/translate", {"text": sentence})[1]["translation"]
        open_page(browser, url)
        assert not browser.find_element(By.ID, "warnings").is_displayed()
        browser.execute_script(WARN)
        press(browser, sentence)
        no_error(browser)
        output = browser.find_element(By.ID, "output").get_attribute("textContent")
        assert output == expected
        assert browser.find_element(By.ID, "go").text == "Translate"
        help = browser.find_element(By.ID, "help").text
        assert "sentence" in help and "translation" in help
        assert "translation" in browser.find_element(By.ID, "map-help").text
        warnings = browser.find_element(By.ID, "warnings")
        assert warnings.is_displayed() and warnings.text == "2 tokens are unknown to the model"
        parts = [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#part option")]
        assert parts[-1].startswith("cross-attention")
        shown = browser.find_element(By.ID, "map")
        assert shown.size["width"] > 100 and shown.size["height"] > 100
        inked = browser.execute_script(  # pixels of the map that are not the white background
            "const c = document.getElementById('attention'); const d = c.getContext('2d')"
            ".getImageData(0, 0, c.width, c.height).data; let n = 0;"
            "for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i + 2] < 250) n++; return n;")
        assert inked > 1000
        screenshot(browser, tmp_path / "serve.png")

        browser.execute_script(REFUSE_TARGET)  # the translation shown refused as a target: the greedy one's map
        press(browser, sentence)
        no_error(browser)
        covers = browser.find_element(By.ID, "map-covers").text
        assert "target is 300 tokens" in covers and "greedy translation" in covers


def test_a_long_sentences_map_scrolls_thins_its_labels_reads_out_weights_and_clears_on_error(
        browser: Any, long_translator: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with start(long_translator) as url:
        ask(browser, url, LONG)
        no_error(browser)
        translation = browser.find_element(By.ID, "output").get_attribute("textContent")
        cross = call(url, "POST", "/attention", {"text": LONG, "target": translation})[1]["maps"][-1]
        assert browser.find_element(By.ID, "map-covers").text.endswith("the translation shown above.")
        browser.execute_script("document.getElementById('pick').scrollIntoView()")  # the map in the screenshot
        at = browser.execute_script(GEOMETRY)
        assert [k["title"] for k in at["keys"]] == cross["keys"] and len(cross["keys"]) >= 70
        assert [q["title"] for q in at["queries"]] == cross["queries"]
        assert at["scroll"]["width"] > at["scroll"]["seen"]  # too wide for the page: the box scrolls
        for labels in (at["keys"], at["queries"]):
            assert 10 < sum(label["shown"] for label in labels) < len(labels)  # thinned, not emptied
        shown = [label for label in at["keys"] + at["queries"] if label["shown"]]
        assert not [(a, b) for i, a in enumerate(shown) for b in shown[i + 1:] if overlap(a, b)]
        cells = at["cells"]
        assert all(k["bottom"] <= cells["top"] for k in at["keys"] if k["shown"])
        assert all(q["right"] <= cells["left"] for q in at["queries"] if q["shown"])

        q, k = 3, 5  # point at a cell: its tokens and the mean of the last layer's heads (the page's default)
        heads = cross["weights"][-1]
        weight = sum(h[q][k] for h in heads) / len(heads)
        cell = (cells["right"] - cells["left"]) / len(cross["keys"])
        pointer = ActionBuilder(browser)
        pointer.pointer_action.move_to_location(int(cells["left"] + (k + 0.5) * cell),
                                                int(cells["top"] + (q + 0.5) * cell))
        pointer.perform()
        tip = WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "tip").is_displayed()
                                               and b.find_element(By.ID, "tip"))
        assert (tip.get_attribute("data-query"), tip.get_attribute("data-key")) == (str(q), str(k))
        assert f"weight {weight:.4f}" in tip.text
        assert f"\u201c{cross['queries'][q]}\u201d" in tip.text and f"\u201c{cross['keys'][k]}\u201d" in tip.text
        assert float(tip.get_attribute("data-weight")) == pytest.approx(weight, abs=1e-9)

        largest = max(sum(h[i][j] for h in heads) / len(heads) for i in range(len(heads[0]))
                      for j in range(len(heads[0][0])))
        assert browser.find_element(By.ID, "scale-bar").is_displayed()
        ticks = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#scale-ticks span")]
        assert float(ticks[0]) == pytest.approx(largest, rel=5e-3) and ticks[-1] == "0"
        screenshot(browser, tmp_path / "attention-long.png")

        press(browser, "   ")  # refused (422): the map of the sentence before goes
        status = browser.find_element(By.ID, "status")
        assert status.get_attribute("class") == "error" and "whitespace" in status.text
        assert browser.find_element(By.ID, "attention").get_attribute("data-state") == "empty"
        assert not browser.find_element(By.ID, "attention-section").is_displayed()
        assert not browser.find_element(By.ID, "tip").is_displayed()
        assert browser.find_element(By.ID, "output").get_attribute("textContent") == ""

        press(browser, "the big cat")
        no_error(browser)
    press(browser, "the big cat")  # the server is gone: a network failure clears the map too
    status = browser.find_element(By.ID, "status")
    assert status.get_attribute("class") == "error" and "cannot reach the server" in status.text
    assert browser.find_element(By.ID, "attention").get_attribute("data-state") == "empty"
    assert not browser.find_element(By.ID, "attention-section").is_displayed()


def test_a_gpt_page_speaks_of_prompts_and_maps_the_continuation(browser: Any, checkpoints: dict) -> None:
    from selenium.webdriver.common.by import By

    prompt = "the big cat"
    with start(checkpoints["gpt"], max_new_tokens=8) as url:
        open_page(browser, url)
        browser.find_element(By.ID, "seed").send_keys("1")
        press(browser, prompt)
        no_error(browser)
        page = browser.find_element(By.TAG_NAME, "body").get_attribute("textContent").lower()
        assert "translat" not in page
        help = browser.find_element(By.ID, "help").text
        assert "prompt" in help and "continuation" in help
        assert browser.find_element(By.ID, "go").text == "Generate"
        written = browser.find_element(By.CSS_SELECTOR, "#output span:last-child").get_attribute("textContent")
        assert len(written) >= 2  # so that the prompt with it is more than a --max-tokens of len(prompt) + 1
        whole = call(url, "POST", "/attention", {"text": prompt + written})[1]["maps"][0]["queries"]
        alone = call(url, "POST", "/attention", {"text": prompt})[1]["maps"][0]["queries"]
        rows = [s.get_attribute("title") for s in browser.find_elements(By.CSS_SELECTOR, "#query-labels span")]
        assert rows == whole and len(rows) > len(alone)
        assert "continuation" in browser.find_element(By.ID, "map-covers").text

    # a server whose --max-tokens takes the prompt (and its start token) but not with the continuation: the
    # map covers the prompt alone, and says why
    with start(checkpoints["gpt"], max_new_tokens=8, max_tokens=len(prompt) + 1) as url:
        open_page(browser, url)
        browser.find_element(By.ID, "seed").send_keys("1")
        press(browser, prompt)
        no_error(browser)
        assert browser.find_element(By.CSS_SELECTOR, "#output span:last-child").get_attribute("textContent") == written
        rows = [s.get_attribute("title") for s in browser.find_elements(By.CSS_SELECTOR, "#query-labels span")]
        assert rows == alone
        covers = browser.find_element(By.ID, "map-covers").text
        assert "prompt only" in covers and "--max-tokens" in covers


def test_markup_typed_in_stays_text(browser: Any, checkpoints: dict) -> None:
    from selenium.webdriver.common.by import By

    markup = "<b>a</b><img src=x onerror=document.title=1>"  # within the tiny GPT's context of 48
    with start(checkpoints["gpt"], max_new_tokens=8) as url:
        ask(browser, url, markup)
        no_error(browser)
        assert browser.find_element(By.CSS_SELECTOR, "#output .prompt").get_attribute("textContent") == markup
        assert browser.find_elements(By.CSS_SELECTOR, "main img, main b") == []
        assert browser.title == "tformer serve"


def test_a_bert_page_speaks_of_texts_and_a_classifiers_of_labels(browser: Any, checkpoints: dict) -> None:
    from selenium.webdriver.common.by import By

    for kind, button, answer in (("bert", "Show attention", "tokens"), ("bert classifier", "Classify", "labels")):
        with start(checkpoints[kind]) as url:
            open_page(browser, url)
            assert browser.find_element(By.ID, "go").text == button
            help = browser.find_element(By.ID, "help").text.lower()
            assert "text" in help and answer in help, (kind, help)
            assert "translat" not in browser.find_element(By.TAG_NAME, "body").get_attribute("textContent").lower()
            press(browser, "the big cat")
            no_error(browser)
            assert browser.find_element(By.ID, "attention").get_attribute("data-state") == "drawn"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#output .label-row")) == 3  # the classifier's labels


# The alpha of the centre pixel of each row's first cell: a picked row is drawn opaque, the others faded.
ROW_ALPHAS = """
const c = document.getElementById("attention"), cell = c.width / arguments[0];
const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
const alpha = (q) => d[(Math.floor((q + 0.5) * cell) * c.width + Math.floor(cell / 2)) * 4 + 3];
return Array.from({length: arguments[1]}, (_, q) => alpha(q));
"""


def test_picking_a_row_shows_where_one_token_attends(browser: Any, checkpoints: dict) -> None:
    """The notes' question, "where does this word attend?", on the page: pick the encoder and the row of one
    token (the row list, or a click on a cell of that row): the other rows fade, and the row's largest weights
    are written under the map, those of /attention's encoder map (the mean of the last layer's heads)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sentence = "the big cat sees the small dog"
    with start(checkpoints["seq2seq"]) as url:
        ask(browser, url, sentence)
        no_error(browser)
        encoder = call(url, "POST", "/attention", {"text": sentence})[1]["maps"][0]
        Select(browser.find_element(By.ID, "part")).select_by_index(0)
        assert browser.find_element(By.ID, "attention").get_attribute("data-row") == ""
        assert not browser.find_element(By.ID, "row-readout").is_displayed()
        q, n = encoder["queries"].index("cat"), len(encoder["queries"])
        Select(browser.find_element(By.ID, "row")).select_by_value(str(q))
        assert browser.find_element(By.ID, "attention").get_attribute("data-row") == str(q)
        heads = encoder["weights"][-1]
        row = [sum(h[q][k] for h in heads) / len(heads) for k in range(n)]
        top = sorted(range(n), key=lambda k: -row[k])[:5]
        readout = browser.find_element(By.ID, "row-readout").text
        assert readout.startswith(f"\u201ccat\u201d (row {q + 1}) attends most to: "), readout
        for k in top:
            assert f"\u201c{encoder['keys'][k]}\u201d (column {k + 1}) {row[k]:.3f}" in readout
        alphas = browser.execute_script(ROW_ALPHAS, n, n)
        assert alphas[q] == 255 and all(a < 80 for i, a in enumerate(alphas) if i != q), alphas
        label = browser.find_elements(By.CSS_SELECTOR, "#query-labels span")[q]
        assert "picked" in label.get_attribute("class")

        canvas = browser.find_element(By.ID, "attention")
        cell = canvas.size["height"] / n
        other = (q + 1) % n
        at = (int(cell / 2 - canvas.size["width"] / 2), int((other + 0.5) * cell - canvas.size["height"] / 2))
        ActionChains(browser).move_to_element_with_offset(canvas, *at).click().perform()  # from the centre
        assert canvas.get_attribute("data-row") == str(other)
        assert browser.find_element(By.ID, "row-readout").text.startswith(f"\u201c{encoder['queries'][other]}\u201d")
        ActionChains(browser).move_to_element_with_offset(canvas, *at).click().perform()  # again: every row
        assert canvas.get_attribute("data-row") == ""
        assert not browser.find_element(By.ID, "row-readout").is_displayed()
        assert set(browser.execute_script(ROW_ALPHAS, n, n)) == {255}
