"""The book's listings: ``{literalinclude}`` of the package's code as the chapters show it.

It drops the kernel registry's decorators (``@registry.kernel``, ``@registry.variant``,
``@registry.triton_kernel``), shows
the docstrings' and doc comments' reST markup as plain text (:func:`plain_docstrings`), and
takes one more flag, ``:no-checks:``, which shows a function's teaching core: its input checks
(``if ...: raise`` blocks and ``check_*`` calls) become one comment line, and stay in the
source. ``gpudl_sphinx`` installs :class:`Listing` in place of Sphinx's directive.
"""

import ast
import io
import re
import textwrap
import tokenize
from pathlib import Path
from types import SimpleNamespace

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.directives.code import LiteralInclude, LiteralIncludeReader

#: The widest listing line (characters) that the code box holds at a window 1280 px wide:
#: measured in headless Chromium with book/_static/gpudl.css, 100 characters of DejaVu Sans
#: Mono (the widest common monospace font) in the text, in a list and in a solution's
#: dropdown alike, less three for other fonts and scroll bars.
LISTING_COLUMNS = 97

CHECKS_OMITTED = "# (input checks omitted here; they are in the source)"


def _is_check(statement: ast.stmt) -> bool:
    """An input check: ``if ...: raise ...`` without ``else``, a bare ``check_*(...)``, or a
    loop or ``if`` whose body holds nothing but checks (left in, it would show an empty
    body)."""
    if isinstance(statement, ast.If) and not statement.orelse and all(
            isinstance(s, ast.Raise) for s in statement.body):
        return True
    if isinstance(statement, ast.For | ast.While | ast.If) and not statement.orelse:
        return all(_is_check(s) for s in statement.body)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name.startswith(("check_", "_check"))
    return False


def strip_checks(code: str) -> str:
    """``code`` with each run of input checks replaced by one :data:`CHECKS_OMITTED` line."""
    lines = code.splitlines()
    tree = ast.parse(textwrap.dedent(code))
    runs: list[tuple[int, int]] = []  # (first line, last line), 0-based, inclusive
    previous_block = None
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for statement in block:
                if not _is_check(statement):
                    continue
                first, last = statement.lineno - 1, statement.end_lineno - 1
                if runs and runs[-1][1] + 1 == first and block is previous_block:
                    runs[-1] = (runs[-1][0], last)
                else:
                    runs.append((first, last))
                previous_block = block
    # a check inside a loop or if that is itself omitted goes with it
    runs = [run for run in runs
            if not any(o != run and o[0] <= run[0] and run[1] <= o[1] for o in runs)]
    for first, last in sorted(runs, reverse=True):
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        lines[first : last + 1] = [indent + CHECKS_OMITTED]
    return "\n".join(lines) + ("\n" if code.endswith("\n") else "")


def strip_registration(code: str) -> str:
    """``code`` without its ``@registry.kernel(...)``, ``@registry.factory(...)``,
    ``@registry.variant(...)`` and ``@registry.triton_kernel(...)`` decorators: the registry's
    bookkeeping (names, signatures, bytes per element, configurations), not what a listing
    teaches."""
    lines, kept, depth = code.split("\n"), [], 0
    for line in lines:
        if depth == 0 and line.lstrip().startswith(("@registry.kernel(", "@registry.factory(",
                                                          "@registry.variant(",
                                                          "@registry.triton_kernel(")):
            depth = line.count("(") - line.count(")")
            continue
        if depth > 0:
            depth += line.count("(") - line.count(")")
            continue
        kept.append(line)
    return "\n".join(kept)


#: A reST role, ``:func:`gpudl.x.f```, ``:class:`~gpudl.X```, ``:data:`title <target>```.
_ROLE = re.compile(r":(?:py:)?([a-z]+):`~?([^`<]*?)\s*(?:<([^`>]*)>)?`")
_LITERAL = re.compile(r"``([^`]+)``")


def _plain_role(match: re.Match) -> str:
    role, text, target = match.groups()
    if target:  # an explicit title
        return text
    last = text.rsplit(".", 1)[-1]
    if role in ("func", "meth"):
        return f"`{last.removesuffix('()')}()`"
    if role in ("class", "exc", "attr", "obj"):
        return f"`{last}`"
    if role == "mod":
        return f"`{text}`"
    return last if role in ("data", "const") else text


def plain_markup(text: str) -> str:
    """``text`` without reST markup: ``:func:`gpudl.x.f``` reads `f()`, ``:class:`X``` `X`,
    ``:data:`X``` X, ````x```` `x`."""
    return _LITERAL.sub(r"`\1`", _ROLE.sub(_plain_role, text))


def plain_docstrings(code: str) -> str:
    """``code`` with the reST markup of its docstrings and doc comments (``#:``) as plain text
    (:func:`plain_markup`); the code itself is left as it is. A listing that Python cannot
    tokenize (a part of a statement) is read as text: a role or a double backtick can only be
    in a string or a comment."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return plain_markup(code)
    starts = [0]
    for line in code.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans = [(starts[t.start[0] - 1] + t.start[1], starts[t.end[0] - 1] + t.end[1])
             for t in tokens if t.type == tokenize.COMMENT or (
                 t.type == tokenize.STRING and t.string.lstrip("rbuRBU")[:3] in ('"""', "'''"))]
    for first, last in reversed(spans):
        code = code[:first] + plain_markup(code[first:last]) + code[last:]
    return code


def listing_text(path: Path, options: dict) -> str:
    """The text a ``{literalinclude}`` of ``path`` with ``options`` shows (for the tests)."""
    reader = LiteralIncludeReader(str(path), options, SimpleNamespace(source_encoding="utf-8"))
    text, _ = reader.read()
    text = plain_docstrings(strip_registration(text))
    return strip_checks(text) if "no-checks" in options else text


class Listing(LiteralInclude):
    """``{literalinclude}`` without the kernel registry's decorators
    (:func:`strip_registration`) and its docstrings' reST markup (:func:`plain_docstrings`),
    and with a ``:no-checks:`` flag (see :func:`strip_checks`)."""

    option_spec = {**LiteralInclude.option_spec, "no-checks": directives.flag}

    def run(self):
        result = super().run()
        for block in result[0].findall(nodes.literal_block):
            text = plain_docstrings(strip_registration(block.astext()))
            if "no-checks" in self.options:
                text = strip_checks(text)
            block.rawsource = text
            block.children = [nodes.Text(text)]
        return result
