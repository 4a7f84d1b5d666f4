"""The built book ships the package (book/_ext/gpudl_wheel.py): each edition has the wheel
beside its labs, the preface and every lab page's download menu link to it, and it installs
with the dependencies pyproject.toml declares and imports."""

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
pytest.importorskip("docutils", reason="the book's tools need docutils")

import gpudl_wheel  # noqa: E402

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
WHEEL = f"{PROJECT['name']}-{PROJECT['version']}-py3-none-any.whl"
EDITIONS = ("", "zh_CN")  # the English edition at the root of the built book, the Chinese one


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def links_to_the_wheel(page: Path) -> list[Path]:
    parser = _Links()
    parser.feed(page.read_text())
    return [(page.parent / href).resolve() for href in parser.hrefs if href.endswith(".whl")]


@pytest.fixture(scope="module")
def html_dir(built) -> Path:
    return built


def test_the_wheel_is_made_the_same_at_every_build(tmp_path):
    first = gpudl_wheel.build(tmp_path / "a").read_bytes()
    assert gpudl_wheel.build(tmp_path / "b").read_bytes() == first
    assert gpudl_wheel.wheel_name() == WHEEL


def test_each_edition_ships_the_wheel_beside_its_labs(html_dir):
    for edition in EDITIONS:
        wheel = html_dir / edition / "notebooks" / WHEEL
        assert wheel.is_file(), f"{wheel} is missing"
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            assert {"gpudl/__init__.py", "gpudl/kernel_resources.json", "gpudl/toolchain.py",
                    "gpudl/kernels/elementwise.py"} <= names
            assert not [n for n in names if "__pycache__" in n]
            info = f"{PROJECT['name']}-{PROJECT['version']}.dist-info"
            metadata = archive.read(f"{info}/METADATA").decode()
            record = archive.read(f"{info}/RECORD").decode()
        requires = re.findall(r"^Requires-Dist: (.*)$", metadata, re.M)
        assert [r for r in requires if ";" not in r] == PROJECT["dependencies"]
        assert 'numba-cuda[cu12]==0.30.4; extra == "gpu"' in requires
        assert {line.split(",")[0] for line in record.splitlines()} == names


def test_the_preface_and_every_lab_page_link_to_it(html_dir):
    for edition in EDITIONS:
        wheel = (html_dir / edition / "notebooks" / WHEEL).resolve()
        assert links_to_the_wheel(html_dir / edition / "book" / "preface.html") == [wheel]
        labs = sorted((html_dir / edition / "notebooks").glob("[0-9]*.html"))
        assert len(labs) == len(list((ROOT / "notebooks").glob("*.ipynb")))
        for lab in labs:
            assert links_to_the_wheel(lab) == [wheel], lab


def test_the_wheel_installs_offline_and_imports(html_dir, tmp_path):
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--no-index", "--no-compile", "--target", str(target),
                           str(html_dir / "notebooks" / WHEEL)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    check = ("import importlib.metadata as m, gpudl, gpudl.toolchain; "
             "print(gpudl.__file__); print(m.version('gpudl'))")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(target)})
    assert done.returncode == 0, done.stderr[-2000:]
    location, version = done.stdout.split()
    assert Path(location).is_relative_to(target) and version == PROJECT["version"]
    assert (target / "bin" / "gpudl").is_file()  # its command
