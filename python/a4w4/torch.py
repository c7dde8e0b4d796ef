"""PyTorch layer: a4w4 as ``torch.library`` custom ops and an ``MXFP4Linear`` module.

- ``torch.ops.a4w4.quantize(x, mode) -> (fp4, scales)`` and ``torch.ops.a4w4.gemm(...)`` are custom
  ops with fake (meta) implementations, so ``torch.compile(fullgraph=True)`` traces them as
  opaque nodes; on CUDA they run on the current torch stream and allocate only through torch,
  so they can be captured in CUDA graphs.
- :class:`MXFP4Linear` quantizes its weight once (prepared for the CUDA decode kernels when it
  lives on a GPU) and quantizes activations on the fly. Inference only: no autograd.

Importing this module needs torch; ``import a4w4`` alone does not.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

import a4w4 as _a4w4

__all__ = ["MXFP4Linear", "gemm", "quantize"]

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _row_major(x: torch.Tensor) -> torch.Tensor:
    # The C API honours row strides but needs a contiguous last dimension.
    return x if x.dim() != 2 or x.stride(-1) == 1 or x.shape[-1] == 1 else x.contiguous()


@torch.library.custom_op("a4w4::quantize", mutates_args=())
def quantize(x: torch.Tensor, mode: str = "rceil") -> tuple[torch.Tensor, torch.Tensor]:
    """x [R, K] float -> (packed E2M1 uint8 [R, K/2], E8M0 uint8 [R, K/32])."""
    return _a4w4.quantize(_row_major(x), mode)


@quantize.register_fake
def _quantize_fake(x: torch.Tensor, mode: str = "rceil") -> tuple[torch.Tensor, torch.Tensor]:
    rows, k = x.shape
    return (
        x.new_empty((rows, k // 2), dtype=torch.uint8),
        x.new_empty((rows, k // 32), dtype=torch.uint8),
    )


def _out_dtype(out_dtype: Optional[torch.dtype], c: Optional[torch.Tensor]) -> torch.dtype:
    if out_dtype is not None:
        return out_dtype
    return c.dtype if c is not None else torch.float32


@torch.library.custom_op("a4w4::gemm", mutates_args=())
def gemm(
    a: torch.Tensor,
    a_scale: torch.Tensor,
    b: torch.Tensor,
    b_scale: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    c: Optional[torch.Tensor] = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    out_dtype: Optional[torch.dtype] = None,
    split_k: int = 0,
    kernel_name: Optional[str] = None,
    prepared_n: int = 0,
    prepared_k: int = 0,
    math_mode: str = "exact",
    prepared_layout: str = "prepared_v2",
    b_constant: bool = False,
) -> torch.Tensor:
    """D = alpha * A.B^T + beta * C + bias (a4w4.gemm as a custom op). With prepared_n > 0, b and
    b_scale are the flat buffers of a weight prepared for the logical shape
    [prepared_n, prepared_k] in ``prepared_layout`` ("prepared_v2" or "prepared_v2_int8").
    (``kernel_name`` is a4w4.gemm's ``kernel``: Inductor reserves ``kernel``.) ``math_mode``:
    "exact" or "fast_accum", ``b_constant``: a4w4.gemm's."""
    bb = (
        _a4w4.PreparedWeight(b, b_scale, prepared_n, prepared_k, prepared_layout)
        if prepared_n > 0
        else _row_major(b)
    )
    return _a4w4.gemm(
        _row_major(a),
        a_scale,
        bb,
        None if prepared_n > 0 else b_scale,
        bias=bias,
        c=c,
        alpha=alpha,
        beta=beta,
        out_dtype=_out_dtype(out_dtype, c),
        split_k=split_k,
        kernel=kernel_name,
        math_mode=math_mode,
        b_constant=b_constant,
    )


@gemm.register_fake
def _gemm_fake(
    a, a_scale, b, b_scale, bias=None, c=None, alpha=1.0, beta=0.0, out_dtype=None,
    split_k=0, kernel_name=None, prepared_n=0, prepared_k=0, math_mode="exact",
    prepared_layout="prepared_v2", b_constant=False,
):  # fmt: skip
    n = prepared_n if prepared_n > 0 else b.shape[0]
    return a.new_empty((a.shape[0], n), dtype=_out_dtype(out_dtype, c))


class MXFP4Linear(torch.nn.Module):
    """y = x . W^T + bias with W and x in MXFP4 (a4w4 GEMM, exact block sums).

    The weight [out_features, in_features] is quantized once (``mode``, default "rceil") and
    kept as packed E2M1 + E8M0 buffers; on CUDA it is also prepared for the decode kernels
    (``prepare``, default: when the weight is on a CUDA device). Each forward quantizes the
    activations [..., in_features] (float32/bfloat16/float16) and returns the input's dtype.
    in_features must be a multiple of 32. Inference only. It runs on ``a4w4.default_context()``: a
    workspace set there (``Context.set_workspace``) lets large batches take the staged int8
    kernel and small ones (M <= 64) convert their activations once per call. ``math_mode``
    "fast_accum" opts into fast accumulation (A4W4_MATH_FAST_ACCUM: error bounded by 2^-5 of the
    sum of |products|, docs/semantics.md; faster on CUDA at 129..256 rows on a prepared weight).
    ``prepare_layout`` "prepared_v2_int8" keeps the weight's int8 form too (about 2.9x the
    prepared bytes): batches from about 128 rows then skip the weight's staging in every call.
    ``constant_weight`` passes a4w4.gemm's ``b_constant``: the module then waits for its weight's
    quantization (and for ``load_state_dict``) to finish on the host, and nothing else may write
    its weight buffers; on CUDA the M = 1 GEMV starts reading the weight before the kernel ahead of
    it has finished (H100: 1 x 8192 x 8192 14.0 -> 12.5 us).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        device: Optional[torch.device | str] = None,
        dtype: torch.dtype = torch.float32,
        mode: str = "rceil",
        prepare: Optional[bool] = None,
        weight: Optional[torch.Tensor] = None,
        math_mode: str = "exact",
        prepare_layout: str = "prepared_v2",
        constant_weight: bool = False,
    ) -> None:
        super().__init__()
        if in_features % 32:
            raise _a4w4.KNotMultipleOf32Error(
                f"in_features: {in_features} is not a multiple of 32", 5
            )
        if math_mode not in ("exact", "fast_accum"):
            raise _a4w4.InvalidArgumentError(
                f"math_mode: expected 'exact' or 'fast_accum', got {math_mode!r}", 1
            )
        self.in_features, self.out_features, self.mode = in_features, out_features, mode
        self.math_mode = math_mode
        self._prepare, self.prepare_layout = prepare, prepare_layout
        self.constant_weight = bool(constant_weight)
        if weight is None:  # nn.Linear's initialisation
            weight = torch.empty(out_features, in_features, device=device, dtype=torch.float32)
            torch.nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        self.register_buffer("weight_fp4", None)
        self.register_buffer("weight_scale", None)
        self.register_buffer("weight_prepared", None)
        self.register_buffer("weight_prepared_scale", None)
        self.quantize_weight_(weight.to(device=device) if device is not None else weight)
        if bias:
            bound = 1 / math.sqrt(in_features)
            b = torch.empty(out_features, device=self.weight_fp4.device, dtype=dtype)
            self.bias = torch.nn.Parameter(b.uniform_(-bound, bound), requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self.register_load_state_dict_post_hook(lambda module, _keys: module._settle_weight())

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, mode: str = "rceil",
                    prepare: Optional[bool] = None, math_mode: str = "exact",
                    prepare_layout: str = "prepared_v2",
                    constant_weight: bool = False) -> MXFP4Linear:  # fmt: skip
        """An MXFP4Linear with `linear`'s weight (quantized) and bias."""
        w = linear.weight.detach()
        m = cls(linear.in_features, linear.out_features, linear.bias is not None,
                device=w.device, dtype=w.dtype if w.dtype in _FLOATS else torch.float32,
                mode=mode, prepare=prepare, weight=w, math_mode=math_mode,
                prepare_layout=prepare_layout, constant_weight=constant_weight)  # fmt: skip
        if linear.bias is not None:
            m.bias.data.copy_(linear.bias.detach())
        return m

    @torch.no_grad()
    def quantize_weight_(self, weight: torch.Tensor) -> None:
        """Quantizes (and, on CUDA by default, prepares) a float weight [out, in] in place."""
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise _a4w4.ShapeMismatchError(
                f"weight: expected shape [{self.out_features}, {self.in_features}], "
                f"got {list(weight.shape)}",
                2,
            )
        w = weight.detach()
        if w.dtype not in _FLOATS:
            w = w.float()
        q, s = _a4w4.quantize(w.contiguous(), self.mode)
        self.weight_fp4, self.weight_scale = q, s
        prepare = self._prepare if self._prepare is not None else q.device.type == "cuda"
        if prepare:
            pw = _a4w4.prepare_weight(q, s, layout=self.prepare_layout)
            self.weight_prepared, self.weight_prepared_scale = pw.weight, pw.scales
        else:
            self.weight_prepared = self.weight_prepared_scale = None
        self._settle_weight()

    def _settle_weight(self) -> None:
        # A constant weight's promise (a4w4.gemm's b_constant): the work that wrote the buffers is
        # synchronised with before any call reads them early.
        w = self.weight_fp4
        if self.constant_weight and w is not None and w.is_cuda:
            torch.cuda.current_stream(w.device).synchronize()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in _FLOATS:
            raise _a4w4.UnsupportedDtypeError(
                f"x: expected float32, bfloat16 or float16, got {x.dtype}", 3
            )
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        q, s = torch.ops.a4w4.quantize(x2, self.mode)
        if self.weight_prepared is not None:
            b, bs = self.weight_prepared, self.weight_prepared_scale
            pn, pk = self.out_features, self.in_features
        else:
            b, bs, pn, pk = self.weight_fp4, self.weight_scale, 0, 0
        bias = self.bias
        y = torch.ops.a4w4.gemm(
            q, s, b, bs, bias, None, 1.0, 0.0, x.dtype, 0, None, pn, pk, self.math_mode,
            self.prepare_layout, self.constant_weight,
        )  # fmt: skip
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, mode={self.mode!r}, "
            f"prepared={self.weight_prepared is not None}, math_mode={self.math_mode!r}, "
            f"prepare_layout={self.prepare_layout!r}, constant_weight={self.constant_weight}"
        )
