"""report and plots: the demo's output directory and HTML page.

The demo document is built by the real demo model, from made-up bench results
(tests/resultdocs.py) and from results the real runner measured on tiny exports (conftest's
`measured`); a small two-node cluster and few steps keep the simulation quick.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from resultdocs import document, run

from dsbench import fmt
from dsbench.errors import DsbenchError
from dsbench.report import demo, plots, verdict
from dsbench.report import html as report
from dsbench.results import document as results

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _docs() -> dict[str, dict[str, Any]]:
    before = document([run(1), run(2, sps=[790.0, 800.0, 810.0])], layout="wds",
                      path="/x/before")
    # after: the incident's re-export: more CPU per sample and two files opened per sample.
    slow_cpu = [0.0064, 0.0065, 0.0066]
    after_stages = {"read": 0.0004, "decode": 0.0030, "fields": 0.0015, "transform": 0.0015,
                    "collate": 0.0001}
    after = document([run(1, sps=[300.0, 305.0, 310.0], cpu=slow_cpu, files_per_sample=2.0,
                          stages=after_stages),
                      run(2, sps=[590.0, 600.0, 610.0], cpu=slow_cpu, files_per_sample=2.0,
                          stages=after_stages)],
                     layout="files", path="/x/after")
    arrow = document([run(1, sps=[420.0, 425.0, 430.0]), run(2, sps=[830.0, 840.0, 850.0])],
                     layout="arrow", path="/x/arrow")
    return {"before": before, "after": after, "arrow": arrow}


def _model(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    opts = demo.DemoOptions(steps=400, cluster=demo.DEMO_CLUSTER.replace(nodes=2))
    return demo.model(docs, exports={n: "/x/" + n for n in demo.EXPORTS}, opts=opts,
                      progress=lambda m: None)


@pytest.fixture(scope="module")
def made() -> dict[str, Any]:
    return _model(_docs())


@pytest.fixture(scope="module", params=["made", "measured"])
def doc(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The demo document from made-up results, then from measured ones."""
    if request.param == "made":
        return request.getfixturevalue("made")
    measured = request.getfixturevalue("measured")
    return _model({n: measured[n] for n in demo.EXPORTS})


@pytest.fixture(scope="module")
def written(doc: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("demo") / "out"
    return out, report.write_all(doc, out, progress=lambda m: None)


def test_write_all_writes_results_document_plots_and_page(
        written: tuple[Path, list[Path]]) -> None:
    out, paths = written
    names = [p.relative_to(out).as_posix() for p in paths]
    assert names == ["results/before.json", "results/after.json", "results/arrow.json",
                     "demo.json", *(f"plots/{f}" for f in plots.FILES), "report.html"]
    assert all(p.is_file() for p in paths)
    assert json.loads((out / "demo.json").read_text())["kind"] == "dsbench-demo"
    for name in plots.FILES:
        data = (out / "plots" / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE), name
        assert len(data) > 10_000, name
    # Nothing left behind by the atomic writes.
    assert not [p for p in out.rglob(".*tmp*")]


def test_result_files_read_back_as_bench_results(written: tuple[Path, list[Path]],
                                                 doc: dict[str, Any]) -> None:
    out, _ = written
    for name in demo.EXPORTS:
        assert results.read_result(out / "results" / f"{name}.json") == doc["results"][name]


def test_page_is_self_contained_and_carries_units(written: tuple[Path, list[Path]],
                                                  doc: dict[str, Any]) -> None:
    out, _ = written
    page = (out / "report.html").read_text(encoding="utf-8")
    assert len(re.findall(r'src="data:image/png;base64,[A-Za-z0-9+/=]+"', page)) == 4
    assert 'src="http' not in page and "<script" not in page and 'href="http' not in page
    assert verdict.verdict_lines(doc)[0] in page
    # Every number in a table cell carries its unit (a ratio its "x", a count what it counts).
    unit = re.compile(r"samples/s|/sample|\bk?B\b|MB|GB|µs|ms|ns|\d s\b|%|\dx\b|workers?\b|"
                      r"GPUs\b|exact")
    cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", page)]
    numeric = [c for c in cells if re.search(r"\d", c)]
    assert len(numeric) > 40
    assert [c for c in numeric if not unit.search(c)] == []
    assert "Modelled, not measured" in page and "Measured on this machine" in page
    assert "Plots were skipped" not in page
    # The measured figures themselves, as the tables print them.
    for name in demo.EXPORTS:
        r = doc["results"][name]["runs"][0]
        assert fmt.rate(r["samples_per_s"]) in page, name
        assert f"{fmt.sig(r['files_per_sample'])} files/sample" in page, name


def test_without_matplotlib_no_plots_and_one_notice(made: dict[str, Any], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plots, "available", lambda: False)
    messages: list[str] = []
    out = tmp_path / "out"
    paths = report.write_all(made, out, messages.append)
    assert not (out / "plots").exists()
    assert [m for m in messages if "matplotlib" in m] == [
        "demo: matplotlib is not installed (pip install 'dsbench[plot]'): no plots"]
    assert paths[-1] == out / "report.html"
    page = paths[-1].read_text(encoding="utf-8")
    assert "Plots were skipped" in page and "matplotlib is not installed" in page
    assert "data:image/png" not in page


def test_user_text_is_escaped(made: dict[str, Any]) -> None:
    hostile = json.loads(json.dumps(made))
    hostile["results"]["before"]["machine"]["cpu_model"] = "<script>alert(1)</script>"
    hostile["comparisons"]["after"]["base"]["path"] = '/x/"><img src=x>'
    page = report.render_html(hostile, {})
    assert "<script>" not in page and "<img src=x>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_rerun_replaces_the_previous_output_whole(made: dict[str, Any], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    report.write_all(made, out, lambda m: None)
    monkeypatch.setattr(plots, "available", lambda: False)
    report.write_all(made, out, lambda m: None)
    assert not (out / "plots").exists()  # no stale plots next to a page that has none
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporaries left


def test_out_must_be_a_new_empty_or_earlier_demo_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(DsbenchError, match="must be a directory"):
        report.check_out_dir(tmp_path / "file")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("keep me")
    with pytest.raises(DsbenchError, match="holds other files"):
        report.check_out_dir(tmp_path / "theirs")
    with pytest.raises(DsbenchError, match="cannot be created"):
        report.check_out_dir(tmp_path / "file" / "sub")
    report.check_out_dir(tmp_path / "new" / "deeper")  # creatable: fine, nothing made yet
    assert not (tmp_path / "new").exists()


# Measures the page where a browser lays it out: appended to a copy of it, so the page itself
# stays free of scripts.
PROBE = """<script>
window.addEventListener('load', () => {
  const top = (sel) => {
    const e = document.querySelector(sel);
    return e ? e.getBoundingClientRect().top : null;
  };
  document.body.setAttribute('data-probe', JSON.stringify({
    scroll_width: document.documentElement.scrollWidth,
    client_width: document.documentElement.clientWidth,
    headline_top: top('.headline'), figure_top: top('figure'),
    first_pre: document.querySelectorAll('pre').length}));
});
</script></body>"""
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
SCREEN = (1300, 900)  # a laptop's browser window, in CSS pixels


def test_in_a_browser_the_first_screen_holds_the_answer_and_nothing_scrolls_sideways(
        written: tuple[Path, list[Path]], tmp_path: Path) -> None:
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:  # .ci/run installs chromium, as it does valgrind
        pytest.skip("no headless Chromium here (apt-get install chromium)")
    out, _ = written
    page = (out / "report.html").read_text(encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", PROBE), encoding="utf-8")
    dom = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={SCREEN[0]},{SCREEN[1]}", "--virtual-time-budget=5000",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120, check=True).stdout
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, dom[-2000:]
    laid = json.loads(html.unescape(found.group(1)))
    assert laid["scroll_width"] <= laid["client_width"] <= SCREEN[0], laid
    # The three-line headline, then the figure of the GPUs' time, start on the first screen.
    assert None not in (laid["headline_top"], laid["figure_top"]), laid
    assert laid["headline_top"] < laid["figure_top"] < SCREEN[1], laid
    assert laid["first_pre"] == 0  # the verdict is sections and items, not a block of text
