from sympy import Matrix
from sympy.matrices.expressions.blockmatrix import BlockDiagMatrix

M = Matrix([[1, 2], [3, 4]])
D = BlockDiagMatrix(M)
# One block is still a block-diagonal matrix: its type and its blocks stay, and it converts to M.
assert isinstance(D, BlockDiagMatrix), type(D)
assert D.diag[0] == M, D.diag
assert Matrix(D) == M
