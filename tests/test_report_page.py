"""``p2pfed report``'s report.html: the graph data a run writes, and each page (a round run, a
contact run, a sweep) loaded from disk in headless Chromium: no console error, plots drawn, and
the contact graph redrawn when the time slider moves."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml

from p2pfed.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = str(ROOT / "scenarios" / "synthetic-small.yaml")
SMALL = ["dataset.synthetic.num_devices=5", "dataset.synthetic.samples_per_class=15", "model.hidden=[8,16]"]
CONTACTS = ["contacts.kind=poisson", "contacts.mean_intercontact_s=200", "contacts.mean_duration_s=20",
            "contacts.duration_s=600", "asynchronous.train_period_s=60", "evaluation.every_s=150"]


def _run(out: Path, sets: list[str]) -> Path:
    assert main(["run", SCENARIO, "--out", str(out), "--quiet", *sum((["--set", s] for s in sets), [])]) == 0
    assert main(["report", str(out)]) == 0
    return out / "report.html"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_contact_run_writes_its_contacts_and_a_page_with_everything_inlined(tmp_path):
    page = _run(tmp_path / "run", SMALL + CONTACTS)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    contacts = _rows(tmp_path / "run" / "contacts.csv")
    assert len(contacts) == summary["contacts"]["contacts"] > 0
    assert all(int(c["a"]) < int(c["b"]) < 5 and float(c["start_s"]) < float(c["end_s"]) for c in contacts)
    text = page.read_text()
    assert "<script src" not in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    data = json.loads(text.split('id="report-data">')[1].split("</script>")[0])
    assert data["x"] == "sim_time_s" and len(data["graph"]["times"]) > 1
    assert sum(len(e) for e in data["graph"]["edges"]) > 0


def test_report_of_a_folder_that_is_neither_run_nor_sweep_is_an_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "nor a run folder" in capsys.readouterr().err


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("no Chromium and chromedriver installed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,1400"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    yield driver
    driver.quit()


def _load(browser, page: Path) -> None:
    browser.get(page.resolve().as_uri())
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


def _drawn_pixels(browser) -> int:
    """The page's non-white pixels, from a screenshot."""
    import io

    import numpy as np
    from PIL import Image

    image = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("L")
    return int((np.asarray(image) < 200).sum())


def _charts(browser) -> list:
    """The page's charts that have a drawn line."""
    charts = browser.find_elements("css selector", "svg.chart")
    return [c for c in charts if c.find_elements("css selector", "polyline")]


@pytest.mark.slow   # three runs and a sweep, in a browser
def test_pages_render_in_a_browser_and_the_slider_redraws_the_contact_graph(browser, tmp_path):
    from selenium.webdriver.common.keys import Keys

    batteries = tmp_path / "batteries.csv"
    batteries.write_text("device,profile,battery_j\n" + "".join(f"{i},phone,{5 if i == 0 else ''}\n" for i in range(5)))
    _load(browser, _run(tmp_path / "rounds", SMALL + ["rounds=3", "devices.radio=lte", f"devices.file={batteries}",
                                                     "adversaries=[{kind: noise, devices: [1]}]"]))
    assert len(_charts(browser)) == 4 and _drawn_pixels(browser) > 5000   # F1, bytes, messages, energy
    assert len(browser.find_elements("css selector", "rect.bar")) == 5 + 1 + 2   # energy, battery, honest/adversary
    assert browser.find_elements("css selector", "#graph line")   # the topology's links
    assert [c.text for c in browser.find_elements("css selector", "td.adversary")][:2] == ["1", "synthetic-1"]
    browser.find_elements("css selector", "th")[2].click()   # f1_macro: sorted ascending
    cells = browser.find_elements("css selector", "table")[0].find_elements("css selector", "tbody tr td:nth-child(3)")
    shown = [float(c.text) for c in cells]
    assert shown == sorted(shown) and len(shown) == 5

    _load(browser, _run(tmp_path / "contacts", SMALL + CONTACTS))
    assert _drawn_pixels(browser) > 5000
    graph = browser.find_element("css selector", "#graph")
    slider = browser.find_element("css selector", "#time-slider")
    drawings = {graph.get_attribute("innerHTML")}
    for _ in range(10):
        slider.send_keys(Keys.ARROW_RIGHT)
        drawings.add(graph.get_attribute("innerHTML"))
    assert len(drawings) > 1   # different moments, different contacts drawn

    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(yaml.safe_dump({"name": "tiny", "scenario": SCENARIO, "methods": ["fedsub", "gossip-avg"],
                                     "seeds": [1, 2], "set": {"rounds": 2, "dataset.synthetic.num_devices": 4,
                                                              "dataset.synthetic.samples_per_class": 15,
                                                              "model.hidden": [8, 16]}}))
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "sweep"), "--quiet"]) == 0
    _load(browser, tmp_path / "sweep" / "report.html")
    assert len(_charts(browser)) == 1 and _drawn_pixels(browser) > 5000
    assert len(browser.find_elements("css selector", "table")) == 2
    paired = list(csv.DictReader((tmp_path / "sweep" / "paired.csv").open()))
    assert len(browser.find_elements("css selector", "svg.chart circle")) == len(paired) > 0   # the forest plot
