"""YAML as Kubernetes reads it: one parser and one set of scalar rules for every file nodeplan loads.

kubectl and the API server read YAML with sigs.k8s.io/yaml (a go-yaml v2 fork, YAML 1.1 flavoured): a plain
``yes``/``on`` is true, ``no``/``off`` false, ``0755`` is octal 493, ``1_000`` is 1000, ``1e3`` is a
float, timestamps stay strings, there are no base-60 numbers, mapping keys become strings and ``<<`` merges.
This module reproduces those rules on libyaml's C parser (PyYAML's ``CParser``) and builds plain dicts, lists
and scalars itself, so the answer never depends on which library happened to accept a file. One deliberate
difference: go-yaml v2 also reads a lone ``y``/``Y``/``n``/``N`` as a boolean; here they stay strings, because
PyYAML (which writes ``nodeplan snapshot`` files, and most generated fixtures) leaves them unquoted.

Bounds (a file breaking one is an ``InputError``, never a hang or unbounded memory):
- aliases may add at most ``MAX_ALIAS_NODES`` nodes beyond the document's own (a "billion laughs" file is
  rejected before anything is built; aliases are built once and shared, never copied);
- nesting deeper than ``MAX_DEPTH`` levels (libyaml itself stops at 1,000);
- a key twice in one mapping (kubectl rejects it too).
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml
import yaml_rs
from yaml._yaml import CParser
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from model.errors import InputError

#: nodes that aliases may add to a document beyond its own distinct nodes
MAX_ALIAS_NODES = 100_000
#: deepest nesting of mappings and sequences in one document
MAX_DEPTH = 200

_PLAIN = "!nodeplan/plain"  # the resolver's mark on an untagged plain scalar; resolved by ``_plain``
_STR = "tag:yaml.org,2002:str"
_KEYWORDS: dict[str, Any] = {
    **dict.fromkeys(("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_INT = re.compile(r"[-+]?(0[bB][01]+|0[oO]?[0-7]+|0[xX][0-9a-fA-F]+|[1-9][0-9]*|0)")
_INT64 = 2**63
_UINT64 = 2**64


def _plain(text: str) -> Any:
    """A plain scalar as go-yaml v2 resolves it: keyword, int (base prefixes, underscores dropped, int64 or
    uint64), float, or else the string itself."""
    if text in _KEYWORDS:
        return _KEYWORDS[text]
    first = text[0]
    if first == ".":
        try:
            return float(text)
        except ValueError:
            return text
    if not (first.isdigit() or first in "+-"):
        return text
    digits = text.replace("_", "")
    if len(digits) <= 70 and _INT.fullmatch(digits):  # longer cannot fit 64 bits (binary has 64 digits)
        sign, body = (-1, digits[1:]) if digits[0] == "-" else (1, digits.lstrip("+"))
        if len(body) > 1 and body[0] == "0" and body[1] in "01234567":
            value = sign * int(body[1:], 8)  # YAML 1.1 octal: 0755
        else:
            value = sign * int(body, 0)
        if -_INT64 <= value < _UINT64:
            return value
    if _FLOAT.fullmatch(digits):
        number = float(digits)
        if math.isfinite(number):
            return number
    return text


class _Loader(CParser):
    """libyaml's parser and composer; every scalar keeps its text, the plain untagged ones marked."""

    def __init__(self, text: str) -> None:
        super().__init__(text)

    def descend_resolver(self, parent: Node | None, index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass

    def resolve(self, kind: type[Node], value: str | None, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode and implicit[0]:
            return _PLAIN
        return _STR if kind is ScalarNode else ""


def _problem(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"malformed YAML{where}: {problem}"


def _line(node: Node) -> str:
    return f"line {node.start_mark.line + 1}"


class _Builder:
    """Python values from one composed document, each node built once (an alias is the same object)."""

    def __init__(self) -> None:
        self.built: dict[int, Any] = {}
        self.sizes: dict[int, int] = {}

    def expanded_size(self, root: Node) -> tuple[int, int]:
        """(nodes with aliases expanded, distinct nodes), without expanding anything."""
        sizes = self.sizes
        order: list[tuple[Node, bool]] = [(root, False)]
        while order:
            node, children_done = order.pop()
            if id(node) in sizes:
                continue
            if isinstance(node, ScalarNode):
                sizes[id(node)] = 1
                continue
            kids = ([n for pair in node.value for n in pair] if isinstance(node, MappingNode) else node.value)
            if children_done:
                sizes[id(node)] = 1 + sum(sizes[id(k)] for k in kids)
            else:
                order.append((node, True))
                order.extend((k, False) for k in kids if id(k) not in sizes)
        return sizes[id(root)], len(sizes)

    def build(self, node: Node, depth: int = 0) -> Any:
        key = id(node)
        if key in self.built:
            return self.built[key]
        if depth > MAX_DEPTH:
            raise InputError(f"YAML nested deeper than {MAX_DEPTH} levels at {_line(node)}")
        if isinstance(node, ScalarNode):
            value = _plain(node.value) if node.tag == _PLAIN else _tagged(node)
        elif isinstance(node, SequenceNode):
            value = []
            self.built[key] = value
            value.extend(self.build(item, depth + 1) for item in node.value)
        elif isinstance(node, MappingNode):
            value = {}
            self.built[key] = value
            self._mapping(node, value, depth)
        else:  # pragma: no cover - libyaml composes only these three
            raise InputError(f"unexpected YAML node at {_line(node)}")
        self.built[key] = value
        return value

    def _mapping(self, node: MappingNode, out: dict[str, Any], depth: int) -> None:
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag == _PLAIN and key_node.value == "<<":
                sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                for source in reversed(sources):
                    built = self.build(source, depth + 1)
                    if not isinstance(built, dict):
                        raise InputError(f"a << merge needs a mapping or a list of mappings at {_line(value_node)}")
                    merged.update(built)
                continue
            if not isinstance(key_node, ScalarNode):
                raise InputError(f"a mapping key must be a scalar at {_line(key_node)}")
            name = _key(self.build(key_node, depth + 1))
            if name in out:
                raise InputError(f"key {name!r} appears twice in one mapping at {_line(key_node)}")
            out[name] = self.build(value_node, depth + 1)
        for name, value in merged.items():
            out.setdefault(name, value)


def _tagged(node: ScalarNode) -> Any:
    """A quoted or explicitly tagged scalar: ``!!str`` and quotes give the text; ``!!int``/``!!float``/
    ``!!bool``/``!!null`` must resolve to that type; other tags are read as the plain scalar would be."""
    tag = node.tag
    if tag == _STR or node.style in ("'", '"', "|", ">"):
        return node.value
    value = _plain(node.value)
    expected = {"tag:yaml.org,2002:int": int, "tag:yaml.org,2002:float": float,
                "tag:yaml.org,2002:bool": bool, "tag:yaml.org,2002:null": type(None)}.get(tag)
    if expected is not None and not (isinstance(value, expected) or (expected is float and isinstance(value, int)
                                                                     and not isinstance(value, bool))):
        raise InputError(f"cannot read {node.value!r} as {tag.rsplit(':', 1)[-1]} at {_line(node)}")
    return float(value) if expected is float else value


def _key(value: Any) -> str:
    """A mapping key as sigs.k8s.io/yaml turns it into JSON: always a string."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("NaN" if math.isnan(value) else
                                                         ("+Inf" if value > 0 else "-Inf"))
    return str(value)


#: What yaml-rs (YAML 1.2, Rust: ~10× faster) could read differently from the rules above, token by token:
#: 1.1 booleans, numbers with a leading zero or underscore, integers beyond int64, huge hex or exponents
#: (values), and non-string plain keys. Merges, anchors, aliases and tags (``<<``, ``&``, ``*``, ``!``) and a
#: top-level sequence (yaml-rs returns a stream and a one-document list alike) also take the exact reader.
#: Conservative: a suspicious token anywhere, even in a comment, only means the exact reader reads the file.
_VALUE_DIFFERS = re.compile(r"(?i:yes|no|on|off)|[-+]?_?0[0-9_][0-9_.]*|[-+]?_[0-9][\w.]*|[-+]?[0-9]{19,}"
                            r"|[-+]?0[xX][0-9a-fA-F]{16,}|[-+]?[0-9]*\.?[0-9]+[eE][-+]?[0-9]{3,}")
_KEY_DIFFERS = re.compile(r"[-+]?[.0-9][\w.+-]*|(?i:true|false|null)|~")
_QUOTED = re.compile(r"(?<!\w)(?:'[^'\n]*'|\"(?:[^\"\\\n]|\\.)*\")")  # an apostrophe in a word opens nothing
_TOKEN = re.compile(r"[^\s\[\]{},#'\"]+")
#: a document whose top level is a sequence
_TOP_SEQUENCE = re.compile(r"(?:\A|^---[^\n]*\n)(?:[ \t]*(?:#[^\n]*)?\n)*-(?:[ \t]|$)", re.MULTILINE)


def _differs(text: str) -> bool:
    """Could yaml-rs read ``text`` differently from the exact reader (or skip one of its bounds)?"""
    if "&" in text or "*" in text or "!" in text or "<<" in text or _TOP_SEQUENCE.search(text):
        return True
    for token in set(_TOKEN.findall(_QUOTED.sub(" ", text))):
        core = token.rstrip(":")
        if _VALUE_DIFFERS.fullmatch(core) or (core != token and _KEY_DIFFERS.fullmatch(core)):
            return True
    return False


def _depth(value: Any) -> int:
    """How deeply collections nest in ``value`` (a scalar: 0); only collections are visited (a 20,000-pod
    batch holds ~3 scalars for each one)."""
    if not isinstance(value, dict | list):
        return 0
    deepest, stack = 1, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = [v for v in (item.values() if isinstance(item, dict) else item) if isinstance(v, dict | list)]
        if children:
            deepest = max(deepest, level + 1)
            stack.extend((v, level + 1) for v in children)
    return deepest


def _fast(text: str) -> list[Any] | None:
    """The documents as yaml-rs reads them, when nothing in the text can read differently (None otherwise)."""
    if _differs(text):
        return None
    try:
        loaded = yaml_rs.loads(text, parse_datetime=False)
    except (yaml_rs.YAMLDecodeError, ValueError, RecursionError):
        return None  # the exact reader says precisely what is wrong
    docs = loaded if isinstance(loaded, list) else [loaded]
    docs = [d for d in docs if d is not None]
    if any(_depth(d) > MAX_DEPTH for d in docs):
        return None
    return docs


def load_all(text: str) -> list[Any]:
    """Every document of a YAML stream (empty documents dropped); raises InputError (no file: the caller
    adds it) for malformed YAML or a document breaking a bound. Text with nothing yaml-rs could read
    differently is read by yaml-rs (the result is the same, ~20× sooner); the rest by the exact reader."""
    fast = _fast(text)
    if fast is not None:
        return fast
    return exact_load_all(text)


def exact_load_all(text: str) -> list[Any]:
    """``load_all`` on libyaml with the rules above, whatever the text."""
    loader = _Loader(text)
    out: list[Any] = []
    try:
        number = 0
        while loader.check_node():
            node = loader.get_node()
            number += 1
            if node is None:
                continue
            builder = _Builder()
            expanded, distinct = builder.expanded_size(node) if "*" in text else (0, 0)  # no alias without *
            if expanded - distinct > MAX_ALIAS_NODES:
                raise InputError(f"YAML aliases in document {number} expand to {expanded:,} nodes, "
                                 f"more than {MAX_ALIAS_NODES:,} beyond its own {distinct:,}")
            value = builder.build(node)
            if value is not None:
                out.append(value)
    except yaml.YAMLError as err:
        raise InputError(_problem(err)) from None
    finally:
        loader.dispose()
    return out
