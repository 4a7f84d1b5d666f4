"""Chapter 10's table of the Triton kernels' warps, stages, registers and shared memory is the
stored resources table (gpudl/kernel_resources.json, which tests/test_kernels_compile.py holds
to a fresh compile), row for row: the prose cannot drift from what the compiler gave."""

import re
from pathlib import Path

from gpudl import resources

PAGE = Path(__file__).resolve().parent.parent / "book" / "ch10-tiles.md"
ROW = re.compile(r"^\| `(\w+)`( \((not causal|causal)\))? \| (.+) \|$", re.M)


def stored_row(kernel: str, causal: str | None) -> dict:
    rows = [r for r in resources.load()["kernels"] if r["kernel"] == kernel
            and (causal is None or f"CAUSAL={causal == 'causal'}" in r["arguments"])]
    assert len(rows) == 1, f"{kernel} ({causal}): {len(rows)} stored rows"
    return rows[0]


def test_the_chapter_s_table_is_the_stored_resources():
    found = ROW.findall(PAGE.read_text())
    assert len(found) >= 9
    for kernel, _, causal, cells in found:
        row = stored_row(kernel, causal or None)
        expected = [row["num_warps"], row["num_stages"], row["sm_80"]["registers"],
                    row["sm_90"]["registers"], f"{row['sm_80']['shared_bytes']:,} B",
                    f"{row['sm_90']['shared_bytes']:,} B"]
        assert [c.strip() for c in cells.split("|")] == [str(e) for e in expected], kernel


def test_listings_drop_the_triton_kernels_registration_and_keep_triton_jit():
    import sys

    sys.path.insert(0, str(PAGE.parent / "_ext"))
    from gpudl_listings import strip_registration

    code = ('@registry.triton_kernel("k", "(*fp32:16, "\n                        "i32)", '
            'configs=[{"BLOCK": 8}])\n@triton.jit\ndef k(x, n, BLOCK: tl.constexpr):\n'
            '    pass\n')
    assert strip_registration(code) == ("@triton.jit\ndef k(x, n, BLOCK: tl.constexpr):\n"
                                        "    pass\n")
