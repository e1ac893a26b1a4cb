"""PolyFit of order 2 on x with only two distinct values: too few to fit, so no curve, as before the fix."""

import warnings

import pandas as pd
from seaborn._core.groupby import GroupBy
from seaborn._stats.regression import PolyFit

warnings.simplefilter("ignore")
# The stat as the plot pipeline calls it (the grouping variable is absent from the data).
data = pd.DataFrame({"x": [1.0, 1.0, 2.0, 2.0, None], "y": [1.0, 2.0, 3.0, 4.0, 5.0]})
curve = PolyFit(order=2)(data, GroupBy(["group"]), "x", {})
assert len(curve) == 0, f"a curve of {len(curve)} points was fitted through two distinct x values"
