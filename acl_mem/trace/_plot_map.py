"""The address map of a device at its in-use peak: the live allocations by address, in
rows of clusters. A 64-bit address space is sparse: a row holds allocations close
enough to draw to scale with the holes between them, and a gap too large for that
starts a new row (the renderers write its size between the rows)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ._figures import Allocation, PoolFigures

__all__ = ["MAX_CLUSTERS", "MIN_BREAK", "AddressMap", "Cluster", "MapItem", "address_map",
           "live_at"]

#: Rows of the address map; a device with more clusters shows those holding most bytes.
MAX_CLUSTERS = 24
#: A hole larger than this and than all the live bytes breaks the row: drawn to scale it
#: would squeeze every block into a sliver.
MIN_BREAK = 1 << 20


@dataclass
class MapItem:
    """A live allocation on the address map.

    ``role``: ``block`` (memory in use), ``container`` (a pool's block or a mapping a
    pool carves: reserved, its segments are in use) or ``segment`` (inside a container).
    """

    allocation: Allocation
    role: str
    band: int
    #: Address space it takes: its reserved bytes when they exceed its size (padding
    #: and page rounding belong to it, they are no hole).
    extent: int

    @property
    def start(self) -> int:
        return self.allocation.address

    @property
    def end(self) -> int:
        return self.allocation.address + self.extent


@dataclass
class Cluster:
    """Allocations close enough to draw to scale on one row."""

    start: int
    end: int
    #: Blocks and containers by address.
    items: list[MapItem]
    #: Segments by address (each inside one of the containers).
    nested: list[MapItem] = field(default_factory=list)
    #: (start, end) of the free address space between consecutive items.
    holes: list[tuple[int, int]] = field(default_factory=list)

    @property
    def live(self) -> int:
        return sum(item.allocation.in_use for item in (*self.items, *self.nested))


@dataclass
class AddressMap:
    """The live allocations of a device at its in-use peak, by address."""

    #: Event index and time of the peak (-1 when nothing was ever in use).
    index: int
    t: int
    clusters: list[Cluster]
    #: Clusters left out (the rows keep the MAX_CLUSTERS holding most bytes).
    omitted: int = 0
    #: Physical memory live at the peak: its handle is no address, so it has no place.
    unplaced: int = 0


def live_at(a: Allocation, index: int) -> bool:
    """Whether ``a`` was live just after event ``index``."""
    return a.index <= index and (a.freed_index is None or a.freed_index > index)


def _map_items(live: list[tuple[Allocation, int]]) -> list[MapItem]:
    items = []
    for a, band in live:
        if a.kind in ("physical", "reservation"):
            continue
        role = "segment" if a.kind == "segment" else "block" if a.in_use else "container"
        extent = a.size if role == "segment" else max(a.size, a.reserved)
        items.append(MapItem(a, role, band, max(extent, 1)))
    items.sort(key=lambda item: (item.start, -item.extent))
    return items


def _clusters(items: list[MapItem]) -> list[Cluster]:
    """Rows of top-level items whose holes are small enough to draw to scale."""
    top = [item for item in items if item.role != "segment"]
    if not top:
        return []
    limit = max(MIN_BREAK, sum(item.extent for item in top))
    clusters = [Cluster(top[0].start, top[0].end, [top[0]])]
    for item in top[1:]:
        row = clusters[-1]
        if item.start - row.end > limit:
            clusters.append(Cluster(item.start, item.end, [item]))
            continue
        if item.start > row.end:
            row.holes.append((row.end, item.start))
        row.items.append(item)
        row.end = max(row.end, item.end)
    _nest([item for item in items if item.role == "segment"], clusters)
    return clusters


def _nest(segments: list[MapItem], clusters: list[Cluster]) -> None:
    """Put each segment in the row holding its address (a segment outside every row,
    its parent unseen, starts a row of its own)."""
    starts = [c.start for c in clusters]
    for segment in segments:
        at = bisect.bisect_right(starts, segment.start) - 1
        if at >= 0 and segment.start < clusters[at].end:
            clusters[at].nested.append(segment)
        else:
            lone = Cluster(segment.start, segment.end, [segment])
            clusters.insert(at + 1, lone)
            starts.insert(at + 1, lone.start)


def address_map(allocations: list[Allocation], bands: list[int], figures: PoolFigures
                ) -> AddressMap:
    """The live allocations at the device's in-use peak, in rows of clusters."""
    index = figures.peak_in_use_index
    if index < 0:
        return AddressMap(index, figures.peak_in_use_t, [])
    live = [(a, band) for a, band in zip(allocations, bands, strict=True)
            if live_at(a, index)]
    clusters = _clusters(_map_items(live))
    omitted = max(0, len(clusters) - MAX_CLUSTERS)
    if omitted:
        keep = sorted(clusters, key=lambda c: -(c.live or c.end - c.start))[:MAX_CLUSTERS]
        clusters = sorted(keep, key=lambda c: c.start)
    unplaced = sum(1 for a, _ in live if a.kind == "physical")
    return AddressMap(index, figures.peak_in_use_t, clusters, omitted, unplaced)
