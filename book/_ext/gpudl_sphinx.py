"""Local Sphinx extension: puts the repository on sys.path for autodoc, and lists the
cross-references that point outside this book (NumPy, torch, numba types in signatures) so that
`-n` (nitpicky) warns only about the book's own broken references."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXTERNAL_TARGET_PREFIXES = ("numpy", "np.", "torch", "numba", "concurrent", "collections.abc")


def _ignore_external(app, env, node, contnode):
    """Drop missing references to types documented elsewhere (NumPy, torch, numba)."""
    target = node.get("reftarget", "")
    if target.startswith(EXTERNAL_TARGET_PREFIXES) or target in {"T", "Path", "pathlib.Path"}:
        return contnode
    return None


def setup(app):
    app.connect("missing-reference", _ignore_external)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
