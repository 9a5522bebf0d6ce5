"""Just enough PromQL reading to list the series an expression selects.

Not a parser: promtool checks syntax. This finds each vector selector (a metric name,
optionally with ``{label matchers}``) so tests can check the names and label names against
what the operator registers. Grafana variables are replaced by values promtool accepts.
"""

from __future__ import annotations

import dataclasses
import re

_GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$namespace": ".*"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHER = re.compile(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_SELECTOR = re.compile(r"(?<![\w.])([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_NAME = re.compile(r"(?<![\w.$])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "inf", "nan"}
)


@dataclasses.dataclass(frozen=True)
class Selector:
    """A vector selector: the metric name, the label names it matches on, and equalities."""

    metric: str
    labels: frozenset[str]
    equals: frozenset[tuple[str, str]] = frozenset()
    """``label="value"`` and ``label!="value"`` matchers (value compared, not a regex)."""


def substitute(expr: str) -> str:
    """``expr`` with the dashboard's Grafana variables replaced by plain values."""
    for variable, value in _GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def selectors(expr: str) -> list[Selector]:
    """Every vector selector in ``expr``, in order (bare names with no labels)."""
    expr = substitute(expr)
    found: list[tuple[int, Selector]] = []
    for match in _SELECTOR.finditer(expr):
        matchers = [m.groups() for m in _MATCHER.finditer(match.group(2))]
        labels = frozenset(label for label, _, _ in matchers) - {"__name__"}
        equals = frozenset((label, value) for label, op, value in matchers if op in {"=", "!="})
        metric = match.group(1) or _metric_from_matchers(match.group(2))
        found.append((match.start(), Selector(metric, labels, equals - {("__name__", metric)})))
    rest = _SELECTOR.sub(lambda m: " " * len(m.group(0)), expr)
    for pattern in (_STRING, _RANGE, _GROUPING):
        rest = pattern.sub(lambda m: " " * len(m.group(0)), rest)
    found += [
        (match.start(), Selector(match.group(1), frozenset()))
        for match in _NAME.finditer(rest)
        if match.group(1).lower() not in _KEYWORDS
    ]
    return [selector for _, selector in sorted(found, key=lambda item: item[0])]


def _metric_from_matchers(matchers: str) -> str:
    match = re.search(r'__name__\s*=\s*"([^"]*)"', matchers)
    return match.group(1) if match else ""
