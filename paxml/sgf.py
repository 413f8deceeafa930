"""Stochastic gradient functions: how a learner turns a loss into gradients.

Public names: GradAuxInfo, BaseStochasticGradient, StandardGradient, and
the differentially private variants (DPGradAuxInfo, DpSgdStochasticGradient,
MicrobatchDpSgdStochasticGradient, AugMulDpSgdStochasticGradient,
PerLayerDpSgdStochasticGradient, GhostClippingDpSgdStochasticGradient,
PercoreClippedDpSgdGradient) from the private sibling `_dp_sgf`.

A loss function takes `(vars_with_grad, (vars_without_grad, inputs),
prng_key)` and returns `(loss, GradAuxInfo)`; a gradient function returns
`((loss, aux), grads)` with grads shaped like `vars_with_grad`.
"""

from paxml import _dp_sgf
from paxml import _sgf_base

GradAuxInfo = _sgf_base.GradAuxInfo
BaseStochasticGradient = _sgf_base.BaseStochasticGradient
StandardGradient = _sgf_base.StandardGradient
DPGradAuxInfo = _dp_sgf.DPGradAuxInfo
DpSgdStochasticGradient = _dp_sgf.DpSgdStochasticGradient
MicrobatchDpSgdStochasticGradient = _dp_sgf.MicrobatchDpSgdStochasticGradient
AugMulDpSgdStochasticGradient = _dp_sgf.AugMulDpSgdStochasticGradient
PerLayerDpSgdStochasticGradient = _dp_sgf.PerLayerDpSgdStochasticGradient
GhostClippingDpSgdStochasticGradient = (
    _dp_sgf.GhostClippingDpSgdStochasticGradient)
PercoreClippedDpSgdGradient = _dp_sgf.PercoreClippedDpSgdGradient

# Shown (repr, model_params.txt, pickles) under this module, as in Pax.
for _cls in (GradAuxInfo, BaseStochasticGradient, StandardGradient,
             DPGradAuxInfo, DpSgdStochasticGradient,
             MicrobatchDpSgdStochasticGradient, AugMulDpSgdStochasticGradient,
             PerLayerDpSgdStochasticGradient,
             GhostClippingDpSgdStochasticGradient,
             PercoreClippedDpSgdGradient):
  _cls.__module__ = __name__
del _cls
