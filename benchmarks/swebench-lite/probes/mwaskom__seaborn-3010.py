"""PolyFit on data where x and y are never both present: nothing to fit, so no curve and no error."""

import warnings

import pandas as pd
from seaborn._core.groupby import GroupBy
from seaborn._stats.regression import PolyFit

warnings.simplefilter("ignore")
# The stat as the plot pipeline calls it (the grouping variable is absent from the data).
data = pd.DataFrame({"x": [1.0, 2.0, 3.0, None], "y": [None, None, None, 4.0]})
curve = PolyFit()(data, GroupBy(["group"]), "x", {})
assert len(curve) == 0, f"a curve of {len(curve)} points was drawn from no complete observation"
