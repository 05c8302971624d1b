"""acl_mem.trace write_plot: the HTML page's structure and figures, escaping of the
trace's strings, downsampling that keeps the peaks, and the PNG."""

from __future__ import annotations

import dataclasses
import io
import sys
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import pytest

import acl_mem
from acl_mem.sizes import KiB, MiB
from acl_mem.trace import Allocation, DeviceFigures, PoolFigures, TraceSummary, record, summarize
from acl_mem.trace._plot import PlotDependencyError, write_plot
from acl_mem.trace._plot_data import build_plot_data, site_label
from acl_mem.trace._plot_series import step_series
from acl_mem.trace._progress import Progress

EVIL_FILE = '<b>&"evil".py'
EVIL_FUNCTION = "<script>alert(1)</script>"


def _weights(dev: acl_mem.Device) -> list[acl_mem.DeviceBuffer]:
    return [dev.malloc(3 * MiB) for _ in range(3)]


def _activations(dev: acl_mem.Device, size: int) -> acl_mem.DeviceBuffer:
    return dev.malloc(size)


def _evil_site() -> Callable[[acl_mem.Device], acl_mem.DeviceBuffer]:
    """A call site whose file and function names are markup: user data to escape."""
    namespace: dict[str, Any] = {}
    exec(compile("def evil(dev):\n    return dev.malloc(5000)\n", EVIL_FILE, "exec"),
         namespace)
    evil = namespace["evil"]
    evil.__code__ = evil.__code__.replace(co_name=EVIL_FUNCTION)
    return evil  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> TraceSummary:
    """A recorded run on the fake: weights and activations from two call sites, a freed
    activation leaving a hole, a segment pool, page-locked host memory."""
    path = tmp_path_factory.mktemp("plot") / "run.jsonl"
    evil = _evil_site()
    with acl_mem.using_backend("fake"), acl_mem.Device(0) as dev, \
            record(path, stack_depth=4):
        weights = _weights(dev)
        acts = [_activations(dev, 100 * KiB) for _ in range(3)]
        acts[1].free()
        pool = acl_mem.SegmentPool(dev)
        segments = [pool.allocate(10_000 * (i + 1)) for i in range(3)]
        host = dev.malloc_host(5000)
        odd = evil(dev)
        spike = _activations(dev, 16 * MiB)
        spike.free()
        for buffer in [*segments, *weights, acts[0], acts[2], odd, host]:
            buffer.free()
        pool.close()
    return summarize(path)


class _Page(HTMLParser):
    """Elements with their attributes and the sections (device) they are in."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], str | None]] = []
        self.section: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "section":
            self.section = values.get("data-device")
        self.elements.append((tag, values, self.section))

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.section = None

    def find(self, tag: str, cls: str | None = None, device: str | None = None
             ) -> list[dict[str, str]]:
        return [attrs for t, attrs, d in self.elements
                if t == tag and (cls is None or cls in attrs.get("class", "").split())
                and (device is None or d == device)]


@pytest.fixture(scope="module")
def page(summary: TraceSummary, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, _Page]:
    out = tmp_path_factory.mktemp("html") / "plot.html"
    assert write_plot(summary, out) == "html"
    text = out.read_text(encoding="utf-8")
    parser = _Page()
    parser.feed(text)
    return text, parser


def test_one_section_per_device_with_a_timeline_and_an_address_map(summary, page):
    _, parsed = page
    devices = [attrs["data-device"] for attrs in parsed.find("section", "device")]
    assert devices == list(summary.devices) == ["0", "host"]
    for device in devices:
        timelines = parsed.find("svg", "timeline", device)
        assert timelines[0]["data-pool"] == "total"
        assert len(parsed.find("svg", "address-map", device)) == 1
    # Device 0 used normal and huge pages: a chart for each pool after the total.
    assert [t["data-pool"] for t in parsed.find("svg", "timeline", "0")] == \
        ["total", "normal", "huge"]
    assert [t["data-pool"] for t in parsed.find("svg", "timeline", "host")] == ["total"]


def test_the_peaks_are_marked_with_their_bytes(summary, page):
    _, parsed = page
    for device, figures in summary.devices.items():
        section = parsed.find("section", "device", device)[0]
        assert section["data-peak-in-use"] == str(figures.total.peak_in_use)
        assert section["data-peak-reserved"] == str(figures.total.peak_reserved)
        # The device's total chart comes first, then one per page pool.
        peaks = {g["data-kind"]: g for g in parsed.find("g", "peak", device)[:2]}
        assert peaks["in-use"]["data-value"] == str(figures.total.peak_in_use)
        assert peaks["in-use"]["data-t"] == str(figures.total.peak_in_use_t)
        assert peaks["reserved"]["data-value"] == str(figures.total.peak_reserved)
    # The spike makes the peak, over the weights, two activations, the segments and odd.
    assert summary.devices["0"].total.peak_in_use == \
        9 * MiB + 2 * 100 * KiB + 60_000 + 5000 + 16 * MiB


def test_the_legend_names_the_call_sites(page):
    _, parsed = page
    sites = [li["data-site"] for li in parsed.find("li", "site", "0")]
    assert any(site.endswith(" in _activations") for site in sites), sites
    assert any(site.endswith(" in _weights") or "<listcomp>" in site for site in sites), sites
    assert sites[0].endswith(" in _activations")  # the most bytes at the peak: the spike
    assert all(site.startswith("test_trace_plot.py:") for site in sites[:2])


def test_sites_beyond_top_sites_share_other(summary, tmp_path):
    out = tmp_path / "plot.html"
    write_plot(summary, out, top_sites=1)
    parsed = _Page()
    parsed.feed(out.read_text(encoding="utf-8"))
    sites = [li["data-site"] for li in parsed.find("li", "site", "0")]
    assert len(sites) == 2 and sites[0].endswith(" in _activations") and sites[1] == "other"
    with pytest.raises(ValueError, match="top_sites"):
        write_plot(summary, out, top_sites=-1)


def test_the_address_map_shows_blocks_holes_and_the_pool(summary, page):
    text, parsed = page
    blocks = parsed.find("rect", "block", "0")
    freed = [a for a in summary.allocations if a.size == 100 * KiB and a.freed_index is not None
             and a.freed_index < summary.devices["0"].total.peak_in_use_index]
    assert len(freed) == 1
    drawn = {(int(b["data-address"]), int(b["data-size"])) for b in blocks}
    assert (freed[0].address, freed[0].size) not in drawn
    holes = [int(h["data-size"]) for h in parsed.find("rect", "hole", "0")]
    # Where the freed one was: an allocator may have put the 5000-byte block there since.
    assert any(size >= 100 * KiB - 8 * KiB for size in holes), holes
    assert len(parsed.find("rect", "container", "0")) == 1  # the pool's block
    host = next(a for a in summary.allocations if a.device == "host")
    assert [int(b["data-address"]) for b in parsed.find("rect", "block", "host")] == \
        [host.address]
    assert f"{host.address:#x}" in text and "aclrtMallocHost" in text


def test_nothing_is_fetched_and_trace_strings_are_escaped(page):
    text, parsed = page
    for _, attrs, _ in parsed.elements:
        for name in ("src", "href"):
            assert not attrs.get(name, "").lower().startswith(("http://", "https://", "//"))
    assert not [tag for tag, _, _ in parsed.elements if tag in ("script", "link", "img", "iframe")]
    assert EVIL_FUNCTION not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;b&gt;&amp;&quot;evil&quot;.py" in text


def test_downsampling_keeps_the_peaks_of_a_long_trace():
    """200 000 allocations, one short spike: at most MAX_POINTS points, every peak kept."""
    summary = _synthetic(200_000, spike=123_457)
    figures = summary.devices["0"].total
    data = build_plot_data(summary)
    series = data.devices[0].timelines[0].series
    assert len(series.times) <= 2000
    in_use = series.in_use()
    assert max(in_use) == figures.peak_in_use
    assert series.times[in_use.index(figures.peak_in_use)] == figures.peak_in_use_t
    assert max(series.reserved) == figures.peak_reserved
    assert series.times == sorted(series.times)
    assert series.in_use()[-1] == figures.in_use  # the level after the last bucket is exact


def test_progress_reaches_its_total(tmp_path):
    seen: list[int] = []

    class Recording(Progress):
        def update(self, done: int, *, label: str | None = None) -> None:
            seen.append(done)

    summary = _synthetic(5000, spike=100)
    write_plot(summary, tmp_path / "plot.html",
               progress=Recording("plot", 777, stream=io.StringIO()))
    assert seen and seen == sorted(seen) and seen[-1] == 777


def test_a_short_series_keeps_every_step():
    # (index, t, band, in use delta, reserved delta); index 3 is one change of two bands.
    events = [(1, 10, 0, 100, 4096), (2, 20, 1, 50, 4096), (3, 30, 0, -100, -4096),
              (3, 30, 1, 10, 0), (4, 40, 1, -60, -4096)]
    series = step_series(events, 2, 50)
    assert series.times == [0, 10, 20, 30, 40]
    assert series.bands == [(0, 0), (100, 0), (100, 50), (0, 60), (0, 0)]
    assert series.reserved == [0, 4096, 8192, 4096, 0]


def test_site_labels():
    assert site_label([("/src/train.py", 42, "step"), ("/src/main.py", 1, "<module>")]) == \
        "train.py:42 in step"
    assert site_label([]) == "(no stack recorded)"


@pytest.mark.parametrize("name", ["plot.svg", "plot.pdf", "plot", "plot.html.gz"])
def test_other_suffixes_are_refused(summary, tmp_path, name):
    with pytest.raises(ValueError, match=r"\.html.*\.png"):
        write_plot(summary, tmp_path / name)
    assert not (tmp_path / name).exists()


def test_png_without_matplotlib_says_what_to_install(summary, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    with pytest.raises(PlotDependencyError, match=r"pip install 'acl_mem\[plot\]'"):
        write_plot(summary, tmp_path / "plot.png")
    assert issubclass(PlotDependencyError, ImportError)


def test_png(summary, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (acl_mem[plot])")
    out = tmp_path / "plot.png"
    assert write_plot(summary, out) == "png"
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


# -- a synthetic summary ---------------------------------------------------------------------------
def _synthetic(count: int, *, spike: int) -> TraceSummary:
    """``count`` allocations on device 0, each living a few dozen events, allocation
    ``spike`` 50 MiB for one event; figures replayed as the summary does."""
    sites = [[("/src/model.py", line, "layer")] for line in range(11)]
    allocations = []
    for i in range(count):
        size = 50 * MiB if i == spike else 1000 + i * 7919 % 5000
        life = 1 if i == spike else 1 + i * 31 % 97
        opened, closed = 2 * i, 2 * (i + life) + 1
        last = closed >= 2 * count
        allocations.append(Allocation(
            "block", "aclrtMalloc", 0x1000_0000 + i * 8192, size, "0", "normal",
            -(-size // 4096) * 4096, size, opened * 100, 1,
            sites[i % 11], None, opened,
            None if last else closed, None if last else closed * 100,
            None if last else "free"))
    total = PoolFigures()
    events = sorted([(a.index, a.t, a.in_use, a.reserved) for a in allocations] +
                    [(a.freed_index, a.freed_t or 0, -a.in_use, -a.reserved)
                     for a in allocations if a.freed_index is not None])
    for index, t, in_use, reserved in events:
        total.add(in_use, reserved, t, index)
    pool = dataclasses.replace(total)  # every allocation is in the normal pool
    return TraceSummary(
        path="synthetic.jsonl", header={"backend": "fake"}, calls=2 * count,
        duration=events[-1][1], threads=1, by_call={}, never_freed=[], failed=[],
        devices={"0": DeviceFigures("0", total, {"normal": pool})}, allocations=allocations)

