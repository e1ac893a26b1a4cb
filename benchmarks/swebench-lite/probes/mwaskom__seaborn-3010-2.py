"""PolyFit of order 2 on x with only two distinct values: too few to fit, so no curve, as before the fix."""

import warnings

import matplotlib

matplotlib.use("Agg")
import seaborn.objects as so  # noqa: E402

warnings.simplefilter("ignore")
x = [1.0, 1.0, 2.0, 2.0, None]
y = [1.0, 2.0, 3.0, 4.0, 5.0]
plotter = so.Plot(x=x, y=y).add(so.Line(), so.PolyFit(order=2)).plot()
points = sum(len(line.get_xdata()) for line in plotter._figure.axes[0].lines)
assert points == 0, f"a curve of {points} points was fitted through two distinct x values"
