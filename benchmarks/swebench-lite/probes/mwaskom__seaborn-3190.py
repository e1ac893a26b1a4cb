import numpy as np
import pandas as pd
from seaborn._core.properties import Alpha
from seaborn._core.scales import Continuous

# A float scale normalizes between its real limits: the smallest value gets the bottom of the range.
scale = Continuous()._setup(pd.Series([0.5, 1.5, 2.5]), Alpha())
low, high = Alpha().default_range
mapped = np.asarray(scale(pd.Series([0.5, 2.5])), dtype=float)
assert np.allclose(mapped, [low, high]), mapped
# The task's boolean data maps too.
Continuous()._setup(pd.Series([True, False]), Alpha())
