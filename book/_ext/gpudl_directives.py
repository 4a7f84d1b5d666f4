"""The book's two directives that render a page's content from stored data: the "Measured on a
GPU" boxes (:class:`MeasuredBox`, whose content ``gpudl_measured`` makes) and the preface's
reading and lab times (:class:`LabTimes`, from ``gpudl_reading``). Those two modules need no
Sphinx, so the tests that use them collect where Sphinx is not installed (a lent GPU machine).
Both write in the edition being built (``gpudl_editions.edition_words``): a text without a
Chinese translation is a warning at the directive.
"""

from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]


class MeasuredBox(SphinxDirective):
    """``{gpudl-measured} TOPIC VIEW``: a "Measured on a GPU" box. Its content says what is
    measured; below it, the ``VIEW`` of ``results/TOPIC-cuda.json`` (``gpudl_results`` in the
    Sphinx config) with the goals it is held to and its provenance, or *not yet measured*
    where no such file exists, beside the book's predictions (``gpudl_predicted``). Without
    arguments the box has no benchmark behind it yet; ``:predict: NAME`` then names the
    predictions it shows (a box of ``gpudl.estimate.predictions.BOXES``). A
    stored file that fails the schema of stored results (``gpudl.bench.results.load_record``:
    it must also hold a ``cuda`` record of its topic, with a commit) or that the view cannot
    draw is an error of the build naming the file and the field."""

    optional_arguments = 2
    has_content = True
    option_spec = {"title": directives.unchanged, "measured-by": directives.unchanged,
                   "predict": directives.unchanged}

    def run(self):
        from gpudl_editions import edition_words
        from gpudl_i18n import generated_nodes
        from gpudl_measured import box_markdown

        from gpudl.bench.results import load_record

        topic, view = (list(self.arguments) + [None, None])[:2]
        record = None
        try:
            if topic is not None:
                path = Path(self.config.gpudl_results) / f"{topic}-cuda.json"
                if path.exists():
                    self.env.note_dependency(str(path))
                    record = load_record(path)
            # figures beside the page: its _generated/ folder (book/_generated for the book)
            page = Path(self.env.doc2path(self.env.docname)).parent
            words = edition_words(self)
            measured = box_markdown(topic, view, record, page / "_generated",
                                    self.options.get("measured-by"), words.language,
                                    words.on_missing, self.options.get("predict"))
        except Exception as err:  # noqa: BLE001  (any stored file the book cannot show is an
            # error of the build, naming the file and the field, never a crash of Sphinx)
            raise self.error(f"gpudl-measured {topic} {view}: {err}") from None
        box = nodes.admonition(classes=["important"])
        title = self.options.get("title", "Measured on a GPU")
        box += nodes.title(title, title)
        box[0].source, box[0].line = self.get_source_info()  # a message to translate
        source = f"gpudl-measured {topic} {view}"
        self.state.nested_parse(StringList(list(self.content), source=source),
                                self.content_offset, box)
        drawn = generated_nodes(self.state, measured, source, self.content_offset)
        if record is not None and words.language == "zh_CN":
            mark_record_cells(drawn, record)
        box += drawn
        return [box]


def mark_record_cells(drawn: list[nodes.Node], record: dict) -> None:
    """Give each table cell of ``drawn`` that holds a name or note of the stored ``record``
    (``gpudl_measured.record_texts``: a row's, a kernel's name), which stays as stored, the
    class ``gpudl-record`` (tests/test_zh_pages.py reads it)."""
    from gpudl_measured import record_texts

    stored = record_texts(record)
    for node in drawn:
        for cell in node.findall(nodes.entry):
            for paragraph in cell.findall(nodes.paragraph):
                if paragraph.astext() in stored:
                    paragraph["classes"].append("gpudl-record")


class LabTimes(SphinxDirective):
    """``{gpudl-lab-times}``: the preface's table of reading times (derived from each chapter's
    words) and lab times (as recorded in each notebook's metadata when it was last executed)."""

    def run(self):
        from gpudl_editions import edition_words
        from gpudl_reading import reading_and_lab_times

        for path in (ROOT / "notebooks").glob("*.ipynb"):
            self.env.note_dependency(str(path))
        words = edition_words(self)
        language = "zh_CN" if words.language == "zh_CN" else "en"
        lines = reading_and_lab_times(ROOT / "book", ROOT / "notebooks", language,
                                      words.on_missing)
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="gpudl-lab-times"), 0, container)
        return container.children
