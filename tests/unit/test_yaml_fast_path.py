"""The fast YAML path (yaml-rs) must read exactly what the exact Kubernetes-rules reader (``model.kyaml``) reads,
or not be taken: random documents built from scalars where YAML 1.1 and 1.2 disagree, in key and value
positions, block and flow style, several documents per stream."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from model import kyaml

TRICKY = ["yes", "No", "ON", "off", "y", "n", "true", "False", "null", "~", "0755", "08", "0", "00", "0o17", "0x1F",
          "0b101", "1_000", "_1", "+1", "-0", "1.5", "1.", ".5", "1e3", "-1.5e-3", "1e400", ".inf", "-.inf", ".nan",
          "1:30", "2001-12-14", "2026-11-01T00:00:00Z", "9223372036854775807", "9223372036854775808",
          "18446744073709551616", "0xFFFFFFFFFFFFFFFFFF", "012345678901234567890", "10.0.0.01", "app-01", "12:05:00",
          "abc", "'yes'", '"0755"', "a b", "x-1", "it's", "it's 'x'", "v1.2.3", "1.2.3", "3Gi", "500m", "@x", "%y"]
KEYS = ["a", "name", "app", "1", "0755", "yes", "true", "null", "1.5", "'quoted'", "k-01", "x.y/z"]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@st.composite
def documents(draw: st.DrawFn) -> str:
    docs = []
    for _ in range(draw(st.integers(1, 3))):
        keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True))
        lines = []
        for key in keys:
            style = draw(st.sampled_from(["plain", "list", "flow", "nested"]))
            value = draw(st.sampled_from(TRICKY))
            if style == "plain":
                lines.append(f"{key}: {value}")
            elif style == "list":
                lines.append(f"{key}:\n  - {value}\n  - {draw(st.sampled_from(TRICKY))}")
            elif style == "flow":
                lines.append(f"{key}: {{{draw(st.sampled_from(KEYS))}: {value}, b: {draw(st.sampled_from(TRICKY))}}}")
            else:
                lines.append(f"{key}:\n  inner: {value}")
        docs.append("\n".join(lines) + "\n")
    return "---\n".join(docs)


@settings(max_examples=400, deadline=None)
@given(documents())
def test_the_fast_path_reads_what_the_exact_reader_reads(text: str) -> None:
    fast = kyaml._fast(text)
    try:
        exact: Any = kyaml.exact_load_all(text)
    except Exception as err:  # the exact reader refuses the document: the fast path must not accept it
        assert fast is None, (text, err)
        return
    if fast is not None:
        assert _same(fast, exact), (text, fast, exact)


def test_kubectl_style_snapshots_take_the_fast_path() -> None:
    """What nodeplan mostly reads (kubectl output, generated snapshots) has none of the ambiguous scalars."""
    text = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-01\n  namespace: default\n"
            "  creationTimestamp: '2026-11-01T00:00:00Z'\n  uid: 3f2e1a90-0c1d-4e5f-a6b7-c8d9e0f1a2b3\n"
            "spec:\n  containers:\n  - name: app\n    resources:\n      requests: {cpu: 500m, memory: 1Gi}\n")
    assert kyaml._fast(text) is not None
    assert kyaml.load_all(text) == kyaml.exact_load_all(text)
