from sympy import symbols
from sympy.polys.monomials import itermonomials

x = symbols("x")
a, b = symbols("a b", commutative=False)
# Mixing commutative and non-commutative variables: x*a and a*x are one monomial.
monomials = list(itermonomials([a, b, x], 2))
assert len(monomials) == len(set(monomials)), sorted(map(str, monomials))
assert x * a in monomials and a * b in monomials and b * a in monomials, monomials
