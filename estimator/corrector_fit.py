"""Fitting corrector grids: penalised robust least squares (a scikit-learn regressor).

See :mod:`serveplan.estimator.correctors` for what a corrector is. :class:`GridRegressor`
solves for every node value of a multilinear grid at once. Imported only by calibration;
the cost oracle never runs it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import cg
from sklearn.base import BaseEstimator, RegressorMixin

from .correctors import Axis, GridTable, corner_weights

__all__ = ["GridRegressor", "interpolation_matrix"]


def interpolation_matrix(X: np.ndarray, axes: list[Axis]) -> sp.csr_matrix:
    """Sparse (rows x nodes) multilinear interpolation weights at log2 features ``X``.

    ``M @ values.ravel()`` equals :func:`~.correctors.interpolate`; ``M`` is the design
    matrix of the grid fit.
    """
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    rows, cols, vals = [], [], []
    for flat, weight in corner_weights(X, axes):
        keep = weight != 0.0
        rows.append(np.flatnonzero(keep))
        cols.append(flat[keep])
        vals.append(weight[keep])
    size = int(np.prod([a.n for a in axes]))
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(X.shape[0], size))


def _difference_penalty(shape: list[int], weights: list[float]) -> sp.csr_matrix:
    """Stacked second-difference operators along each axis (scaled by sqrt(weight))."""
    blocks = []
    for d, n in enumerate(shape):
        if n < 3 or weights[d] <= 0:
            continue
        d2 = sp.diags([1.0, -2.0, 1.0], [0, 1, 2], shape=(n - 2, n))
        ops = [sp.identity(m, format="csr") for m in shape]
        ops[d] = d2
        op = ops[0]
        for o in ops[1:]:
            op = sp.kron(op, o, format="csr")
        blocks.append(np.sqrt(weights[d]) * op)
    if not blocks:
        return sp.csr_matrix((0, int(np.prod(shape))))
    return sp.vstack(blocks, format="csr")


class GridRegressor(RegressorMixin, BaseEstimator):
    """Penalised robust least squares on a multilinear grid (a scikit-learn regressor).

    Minimises ``sum_i rho(y_i - (M v)_i) + lam * N/G * sum_d ||D2_d v||^2
    + ridge * N/G * ||v||^2`` over node values ``v``, where ``M`` is the interpolation
    matrix (:func:`interpolation_matrix`), ``D2_d`` the second difference along axis d,
    ``N/G`` rows per node (so the penalty strength does not depend on the data size) and
    ``rho`` the Huber loss with threshold ``huber`` (solved by iteratively reweighted
    least squares, ``n_iter`` rounds).

    Parameters
    ----------
    axes : list of Axis
        The grid; ``X`` columns are log2 features in the same order.
    smooth : float or sequence of float
        Second-difference penalty per axis (``lam``).
    ridge : float
        Pull towards 0 (no correction) where data are absent.
    huber : float
        Residual (log units) beyond which the loss grows linearly.
    n_iter : int
        IRLS rounds.
    """

    def __init__(self, axes=None, smooth=0.3, ridge=1e-4, huber=0.05, n_iter=6):
        self.axes = axes
        self.smooth = smooth
        self.ridge = ridge
        self.huber = huber
        self.n_iter = n_iter

    def fit(self, X, y, sample_weight=None):
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        axes = list(self.axes)
        shape = [a.n for a in axes]
        size = int(np.prod(shape))
        M = interpolation_matrix(X, axes)
        base_w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
        per_node = max(float(base_w.sum()) / size, 1.0)
        smooth = np.broadcast_to(np.asarray(self.smooth, dtype=float), (len(axes),))
        D = _difference_penalty(shape, list(smooth * per_node))
        P = (D.T @ D + self.ridge * per_node * sp.identity(size)).tocsc()
        w = base_w.copy()
        v = np.zeros(size)
        for _ in range(max(int(self.n_iter), 1)):
            Mw = M.T.multiply(w).tocsr()
            A = (Mw @ M + P).tocsr()
            rhs = Mw @ y
            # conjugate gradients, warm-started; Jacobi preconditioner
            v, _info = cg(A, rhs, x0=v, rtol=1e-8, maxiter=2000,
                          M=sp.diags(1.0 / np.maximum(A.diagonal(), 1e-12)))
            r = np.abs(y - M @ v)
            w = base_w * np.where(r <= self.huber, 1.0, self.huber / np.maximum(r, 1e-300))
        self.values_ = v.reshape(shape)
        self.n_rows_ = len(y)
        return self

    def predict(self, X):
        """Interpolated log correction at log2 features ``X``."""
        return interpolation_matrix(np.asarray(X, dtype=np.float64), list(self.axes)) \
            @ self.values_.ravel()

    def to_table(self, family: str, select: dict[str, str] | None = None) -> GridTable:
        """The fitted grid as a stored (quantised) :class:`GridTable`."""
        return GridTable.from_values(family, list(self.axes), self.values_, select,
                                     n_rows=self.n_rows_)


