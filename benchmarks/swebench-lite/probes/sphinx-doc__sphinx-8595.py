"""A module with an empty __all__: a member named explicitly in :members: is still documented."""

import os
import tempfile

from sphinx.application import Sphinx

with tempfile.TemporaryDirectory() as folder:
    source = os.path.join(folder, "source")
    os.makedirs(source)
    with open(os.path.join(source, "emptyall_probe.py"), "w") as f:
        f.write(
            '__all__ = []\n\n\ndef named_function():\n    "named docstring"\n\n\n'
            'def other_function():\n    "other docstring"\n'
        )
    with open(os.path.join(source, "conf.py"), "w") as f:
        f.write(
            "import os, sys\nsys.path.insert(0, os.path.abspath('.'))\nextensions = ['sphinx.ext.autodoc']\n"
        )
    with open(os.path.join(source, "index.rst"), "w") as f:
        f.write("Probe\n=====\n\n.. automodule:: emptyall_probe\n   :members: named_function\n")
    out = os.path.join(folder, "out")
    app = Sphinx(
        source,
        source,
        out,
        os.path.join(folder, "doctrees"),
        "text",
        status=None,
        warning=None,
        freshenv=True,
    )
    app.build()
    with open(os.path.join(out, "index.txt")) as f:
        text = f.read()
print(text)
assert "named_function" in text, "the explicitly named member is missing"
assert "other_function" not in text, "a member not asked for is documented"
