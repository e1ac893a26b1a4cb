from sphinx.ext.napoleon import Config
from sphinx.ext.napoleon.docstring import NumpyDocstring

docstring = """\
Other Parameters
----------------
x, y : int
    The coordinates.
"""
rendered = str(NumpyDocstring(docstring, Config(napoleon_use_param=True)))
# With napoleon_use_param, several names on one line become one :param: each, as in Parameters.
assert ":param x: The coordinates." in rendered, rendered
assert ":param y: The coordinates." in rendered, rendered
