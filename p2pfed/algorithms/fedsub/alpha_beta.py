"""The alpha-beta rule of Layer-wise Relevance Propagation for one linear layer (FedSub Eq. 3-5),
written once for dense layers and convolutions alike."""

from __future__ import annotations

from collections.abc import Callable

import torch


def alpha_beta(a: torch.Tensor, w: torch.Tensor, rel: torch.Tensor, alpha: float, beta: float,
               forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               backward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """One linear layer of the alpha-beta rule without the (samples, out, in) contribution tensor:
    ``forward(a, w)`` is the layer without bias (a matrix product, a convolution) and
    ``backward(r, w)`` its transpose applied to output-shaped ``r``.

    z_ji = a_i w_ji is positive exactly where a_i and w_ji share a sign, so the positive part is
    a+ w+ + a- w- and the negative part a+ w- + a- w+; each sum over i is one forward pass, and
    sending relevance back one transposed pass (inputs after a ReLU have a- = 0, which makes half
    the terms vanish).
    """
    ap, an = a.clamp(min=0), a.clamp(max=0)
    wp, wn = w.clamp(min=0), w.clamp(max=0)
    sp = forward(ap, wp) + forward(an, wn)                       # sum of positive z per output
    rp = alpha * torch.where(sp > 0, rel / sp.clamp(min=1e-12), torch.zeros_like(rel))
    back = ap * backward(rp, wp) + an * backward(rp, wn)
    if beta:
        sn = forward(ap, wn) + forward(an, wp)                   # sum of negative z per output
        rn = beta * torch.where(sn < 0, rel / sn.clamp(max=-1e-12), torch.zeros_like(rel))
        back = back - (ap * backward(rn, wn) + an * backward(rn, wp))
    return back
