"""Histograms observed on the engine's hot paths, counted in plain lists under one lock and served
at scrape time exactly as prometheus-client's :class:`~prometheus_client.Histogram` serves them.

prometheus-client's ``Histogram.observe`` takes a lock for each of its two increments (the sum,
the bucket) after finding the bucket by a walk of the bounds; a step's duration and a turn's are
observed once per step and turn, which made the metrics 3-5 % of a run's instructions
(``python -m bench.instructions --without metrics``). :class:`LabelledHistogram` keeps per child
a list of counts (one a bucket, not cumulative) and a sum, updated under one lock with the bucket
found by bisection, and yields the same family when scraped: the cumulative ``_bucket`` samples
with prometheus-client's ``le`` strings, ``_count``, ``_sum`` and, unless
``disable_created_metrics()`` was called, ``_created`` (tests/unit/test_metrics_local.py compares
both, sample for sample). The writers' batch histograms (``WriterBatches`` in ``_metrics.py``) are
served by :func:`histogram_family` too.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import prometheus_client.metrics
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString as _untyped_go_string

#: A bucket's ``le`` as prometheus-client writes it ("0.005", "1.0", "+Inf").
_go_string: Callable[[float], str] = _untyped_go_string

#: One child's figures for :func:`histogram_family`: (label values, counts a bucket with the
#: last for +Inf, sum, created).
Child = tuple[Sequence[str], Sequence[int], float, float]


def histogram_family(name: str, doc: str, labelnames: Sequence[str], bounds: Sequence[float],
                     children: Sequence[Child]) -> HistogramMetricFamily:  # fmt: skip
    """A histogram family as prometheus-client's :class:`Histogram` serves it: for each child the
    cumulative buckets named as it names them, ``_count``, ``_sum``, and ``_created`` unless
    disabled."""
    family = HistogramMetricFamily(name, doc, labels=labelnames)
    created = getattr(prometheus_client.metrics, "_use_created", True)  # disable_created_metrics()
    for values, counts, total, since in children:
        cumulative = list(itertools.accumulate(counts))
        buckets = [(_go_string(b), float(n)) for b, n in zip(bounds, cumulative[:-1], strict=True)]
        buckets.append(("+Inf", float(cumulative[-1])))
        family.add_metric(list(values), buckets, total)
        if created:
            family.add_sample(f"{name}_created", dict(zip(labelnames, values, strict=True)), since)
    return family


class _Child:
    """One set of label values' counts (see :class:`LabelledHistogram`)."""

    __slots__ = ("_bounds", "_lock", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...], lock: threading.Lock) -> None:
        self._bounds = bounds
        self._lock = lock
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf
        self.total = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        """One observation (a value goes in the first bucket whose bound it does not exceed, as
        Prometheus's ``le``)."""
        with self._lock:
            self.counts[bisect.bisect_left(self._bounds, amount)] += 1
            self.total += amount


class LabelledHistogram(Collector):
    """A histogram with labels, observed through its children (:meth:`labels`, one object per set
    of values, as prometheus-client's), registered on ``registry``."""

    def __init__(self, name: str, doc: str, labelnames: Sequence[str], *, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:  # fmt: skip
        self.name, self.doc = name, doc
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        if list(self.bounds) != sorted(set(self.bounds)) or not self.labelnames:
            raise ValueError(f"{name}: buckets must increase and there must be labels")
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], _Child] = {}
        registry.register(self)

    def labels(self, *values: str) -> _Child:
        """The child of these label values (made on first use, then always the same object)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected, not {len(values)}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children.setdefault(key, _Child(self.bounds, self._lock))
        return child

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            children = [(k, list(c.counts), c.total, c.created) for k, c in self._children.items()]
        yield histogram_family(self.name, self.doc, self.labelnames, self.bounds, children)

    def describe(self) -> Iterator[HistogramMetricFamily]:
        """What the registry checks names against (without reading the counts)."""
        yield HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)


__all__ = ["LabelledHistogram", "histogram_family"]
