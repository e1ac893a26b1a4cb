"""PolyFit on data where x and y are never both present: nothing to fit, so no curve and no error."""

import warnings

import matplotlib

matplotlib.use("Agg")
import seaborn.objects as so  # noqa: E402

warnings.simplefilter("ignore")
x = [1.0, 2.0, 3.0, None]
y = [None, None, None, 4.0]
plotter = so.Plot(x=x, y=y).add(so.Line(), so.PolyFit()).plot()
points = sum(len(line.get_xdata()) for line in plotter._figure.axes[0].lines)
assert points == 0, f"a curve of {points} points was drawn from no complete observation"
