"""User-controlled text (object names, label values, reasons, file names) made inert for the terminal and
for Markdown: nothing a cluster or a pull request writes can style, link, hide or inject output."""

from __future__ import annotations

import re

from rich.markup import escape

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 (but tab, newline) and C1: escape sequences
_MARKDOWN = re.compile(r"([\\`*_{}\[\]#~|])")  # with [ ] escaped, ( ) and ! cannot form links or images


def terminal(text: object) -> str:
    """Text for a rich console: markup brackets escaped, control characters shown as ``\\xNN``."""
    return escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)))


def markdown(text: object) -> str:
    """Text for a GitHub comment: Markdown and HTML punctuation backslash-escaped, ``@`` unable to mention,
    one line."""
    plain = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)).replace("\n", " ").replace("\r", " ")
    entities = plain.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN.sub(r"\\\1", entities).replace("@", "&#64;")
