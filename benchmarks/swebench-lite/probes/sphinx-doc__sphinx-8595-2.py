"""A member left out of a non-empty __all__ still reaches autodoc-skip-member, whose handler may keep it."""

import os
import tempfile

from sphinx.application import Sphinx

with tempfile.TemporaryDirectory() as folder:
    source = os.path.join(folder, "source")
    os.makedirs(source)
    with open(os.path.join(source, "partial_all_probe.py"), "w") as f:
        f.write(
            "__all__ = ['listed_function']\n\n\n"
            'def listed_function():\n    "listed docstring"\n\n\n'
            'def rescued_function():\n    "rescued docstring"\n\n\n'
            'def hidden_function():\n    "hidden docstring"\n'
        )
    # The handler keeps one member that __all__ leaves out and says nothing about the others.
    with open(os.path.join(source, "conf.py"), "w") as f:
        f.write(
            "import os, sys\n"
            "sys.path.insert(0, os.path.abspath('.'))\n"
            "extensions = ['sphinx.ext.autodoc']\n\n\n"
            "def keep_rescued(app, what, name, obj, skip, options):\n"
            "    return False if name == 'rescued_function' else None\n\n\n"
            "def setup(app):\n"
            "    app.connect('autodoc-skip-member', keep_rescued)\n"
        )
    with open(os.path.join(source, "index.rst"), "w") as f:
        f.write("Probe\n=====\n\n.. automodule:: partial_all_probe\n   :members:\n")
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
assert "listed_function" in text, "the member named in __all__ is missing"
assert "hidden_function" not in text, "a member outside __all__ is documented though no handler kept it"
assert "rescued_function" in text, "the autodoc-skip-member handler could not keep a member outside __all__"
