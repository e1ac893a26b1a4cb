"""The static parts of the HTML report: its stylesheet and its script, inlined so the file stands alone.

They are package data (`report.css`, `report.js` beside this module), read once on import.

The script's one rule: data from the run (patches, transcripts, ids, rationales) is untrusted, so it only
ever reaches the page as text nodes (`textContent`, `append(string)`) or as numeric SVG attributes. Nothing
here assigns HTML, and the page's Content-Security-Policy allows only this script and this stylesheet (by
hash), so a candidate's `<script>` can at worst be read, never run.
"""

from __future__ import annotations

from importlib import resources


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


CSS = _read("report.css")
JS = _read("report.js")
