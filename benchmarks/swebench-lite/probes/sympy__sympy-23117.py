from sympy import Array

# A scalar still makes a rank-0 array, as before the fix for empty arrays.
a = Array(5)
assert a.shape == (), a.shape
assert a.rank() == 0, a.rank()
# The empty array of the task.
assert Array([]).shape == (0,), Array([]).shape
