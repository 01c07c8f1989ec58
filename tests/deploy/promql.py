"""Metric names in PromQL, and the Prometheus text exposition they are checked against.

Only what the deployment checks need: the leapcache_* names an expression reads (with the
functions applied to them), label names used in selectors and groupings, and the families,
types and label sets of a /metrics scrape.
"""

import re

# Series Prometheus makes itself (not scraped from the server), which expressions may read.
SYNTHETIC_METRICS = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# Labels Prometheus attaches to every scraped series; the server never exports them.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME = re.compile(r"(?<![A-Za-z0-9_:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)")
_KEYWORDS = {
    # Aggregations, functions and keywords: identifiers that are not metric names.
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "atan2", "inf", "nan",
}
_RATE_FUNCS = {"rate", "irate", "increase", "delta", "idelta", "deriv"}


def strip_strings(expr):
    """The expression with every string literal emptied ("..." -> ""), so label values and
    regular expressions cannot be mistaken for names."""
    return _STRING.sub('""', expr)


def metric_references(expr):
    """[(name, function)] for each series selector in `expr`: the metric name and the range
    function applied directly to it (rate, increase, ...) or None."""
    text = strip_strings(expr)
    # Label matchers and groupings hold label names, not metrics.
    text_no_braces = re.sub(r"\{[^}]*\}", "{}", text)
    groupings = r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"
    text_no_groups = re.sub(groupings, r"\1()", text_no_braces)
    refs = []
    for m in _NAME.finditer(text_no_groups):
        name = m.group(1)
        rest = text_no_groups[m.end():].lstrip()
        if name in _KEYWORDS or rest.startswith("("):
            continue  # a keyword or a function call
        if re.fullmatch(r"[0-9.]+[smhdwy]?|e[0-9]*", name):
            continue
        before = text_no_groups[:m.start()].rstrip()
        func = None
        fm = re.search(r"([a-z_]+)\s*\(\s*$", before)
        if fm and fm.group(1) in _RATE_FUNCS:
            func = fm.group(1)
        refs.append((name, func))
    return refs


def label_names(expr):
    """Label names used in matchers and in by/without/on/ignoring groupings of `expr`."""
    text = strip_strings(expr)
    names = set()
    for block in re.findall(r"\{([^}]*)\}", text):
        names.update(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", block))
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", text):
        names.update(n.strip() for n in group.split(",") if n.strip())
    return names


class Exposition:
    """A parsed Prometheus text exposition (format 0.0.4)."""

    def __init__(self, text):
        self.types = {}      # family -> counter | gauge | histogram | summary | untyped
        self.labels = {}     # sample name -> set of label names seen on it
        self.samples = {}    # (sample name, frozenset of label items) -> value
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, family, kind = line.split(None, 3)
                self.types[family] = kind.strip()
                continue
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)", line)
            if not m:
                raise ValueError(f"unparsable exposition line: {line!r}")
            pairs = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or "")
            labels = dict(pairs)
            self.labels.setdefault(m.group(1), set()).update(labels)
            self.samples[(m.group(1), frozenset(labels.items()))] = float(m.group(4))

    def family_of(self, name):
        """(family, type) that series `name` belongs to, or (None, None)."""
        if name in self.types:
            return name, self.types[name]
        for suffix in HISTOGRAM_SUFFIXES:
            base = name[: -len(suffix)]
            if name.endswith(suffix) and self.types.get(base) in ("histogram", "summary"):
                return base, self.types[base]
        return None, None

    def value(self, name, **labels):
        total = None
        for (n, items), v in self.samples.items():
            if n == name and all((k, val) in items for k, val in labels.items()):
                total = (total or 0) + v
        return total


def check_reference(expo, name, func):
    """A problem with one metric reference against a scrape, or None."""
    family, kind = expo.family_of(name)
    if family is None:
        return f"{name} is not exported by the server"
    if kind == "histogram" and name == family:
        return f"{name} is a histogram: query its _bucket, _sum or _count series"
    if func and not (kind == "counter" or (kind == "histogram" and name != family)):
        return f"{func}() of {name}, a {kind}: rates apply to counters and histogram series"
    if kind == "counter" and func is None:
        return f"{name} is a counter read without rate()/increase(): it only ever grows"
    return None
