"""Sphinx configuration for the builds that `jupyter-book build` does not run: the message
catalogues (`make pot`) and the Chinese edition (`make book`: `sphinx-build -t zh_CN`).

Every value comes from _config.yml through Jupyter Book's own `get_final_config`, so the
English and Chinese builds cannot drift apart; `jupyter-book build` never reads this file.
Under the tag ``zh_CN`` the language and the search index's dictionary (the glossary's Chinese
terms, for jieba) are set for Chinese; the title, the search box, the dropdowns' hints and the
other words of the configuration are then put into Chinese from locales/zh_CN/extensions.po
(book/_ext/gpudl_editions.py)."""

from pathlib import Path

from jupyter_book.config import get_final_config

ROOT = Path(__file__).resolve().parent
_config, _ = get_final_config(
    user_yaml=ROOT / "_config.yml", sourcedir=ROOT,
    cli_config={"external_toc_path": "_toc.yml", "latex_individualpages": False})
globals().update(_config)

project = _config["html_title"]

if tags.has("zh_CN"):  # noqa: F821 (Sphinx gives conf.py its tags)
    from gpudl_i18n import LANGUAGE, write_search_dictionary

    language = LANGUAGE
    html_search_options = {"dict": str(write_search_dictionary(ROOT / "_build"))}
