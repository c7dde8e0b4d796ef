"""a4w4: MXFP4 x MXFP4 GEMM (OCP MX: E2M1 elements, one E8M0 scale per 32 elements along K).

A thin layer over a4w4's C API (the contract; see docs/semantics.md). Arrays travel zero-copy
through DLPack: NumPy, PyTorch, CuPy and JAX arrays (CPU or CUDA) are accepted, and results come
back in the framework and on the device of the first operand. Python adds no numerics.

Forms of the MX operands:

- packed E2M1: ``uint8 [rows, K/2]``, element 2i in the low nibble (also torch's
  ``float4_e2m1fn_x2`` and DLPack ``float4_e2m1fn`` arrays). ml_dtypes' ``float4_e2m1fn`` arrays
  hold one element per byte and are refused: :func:`pack_fp4` packs them.
- E8M0 scales: ``uint8 [rows, K/32]`` (also ml_dtypes / torch ``float8_e8m0fnu``).
- floats: float32, float16, bfloat16 (torch/JAX native, ml_dtypes.bfloat16 for NumPy).

Matrices are 2-D with a contiguous last dimension; row strides are honoured (slices of rows or
columns by whole blocks work without a copy); anything else is refused with the C API's error.

>>> import numpy as np, a4w4
>>> x = np.random.randn(64, 256).astype(np.float32)
>>> w = np.random.randn(128, 256).astype(np.float32)
>>> xq, xs = a4w4.quantize(x)
>>> wq, ws = a4w4.quantize(w)
>>> y = a4w4.gemm(xq, xs, wq, ws)   # [64, 128] float32 = dequant(x) @ dequant(w).T
"""

from __future__ import annotations

import os
import threading
from typing import Any, NamedTuple

from . import _core
from . import _frameworks as _fw
from ._errors import (
    BackendNotCompiledError,
    ConfigError,
    DeviceError,
    DeviceMismatchError,
    Error,
    InternalError,
    InvalidArgumentError,
    KernelNotApplicableError,
    KernelNotFoundError,
    KNotMultipleOf32Error,
    NoDeviceError,
    OutOfMemoryError,
    ShapeMismatchError,
    Status,
    UnsupportedDtypeError,
    UnsupportedLayoutError,
)

__version__ = _core.library_version()

__all__ = [
    "BackendInfo",
    "BackendNotCompiledError",
    "ConfigError",
    "Context",
    "DeviceError",
    "DeviceMismatchError",
    "Error",
    "InternalError",
    "InvalidArgumentError",
    "KernelInfo",
    "KernelNotApplicableError",
    "KernelNotFoundError",
    "KNotMultipleOf32Error",
    "NoDeviceError",
    "OutOfMemoryError",
    "PreparedWeight",
    "ShapeMismatchError",
    "Status",
    "UnsupportedDtypeError",
    "UnsupportedLayoutError",
    "backends",
    "default_context",
    "dequantize",
    "device_tuning_key",
    "gemm",
    "gemm_workspace_size",
    "kernels",
    "pack_fp4",
    "prepare_weight",
    "quantize",
    "unpack_fp4",
]

_MODES = {"floor": 0, "rceil": 1, "even": 2}
_MATH = {"exact": 0, "fast_accum": 1}


class BackendInfo(NamedTuple):
    name: str
    compiled: bool  # built into this copy of a4w4
    available: bool  # compiled in and usable now (a device is present)
    device_count: int


class KernelInfo(NamedTuple):
    """A registered GEMM kernel (a4w4_kernel_describe): its name (for ``gemm(kernel=)``), backend,
    path ("cpu", "decode", "bf16", "fp8", "generic"), the D tile one CTA computes and its K step
    (0: adaptive), the largest split_k it takes (0: any), whether split-K partitions run in
    parallel, whether it picks its own split for split_k=0, the M range (max_m 0: unbounded) and
    what else it checks."""

    name: str
    backend: str
    path: str = ""
    tile_m: int = 0
    tile_n: int = 0
    tile_k: int = 0
    max_split_k: int = 0
    split_k_parallel: bool = False
    auto_split_k: bool = False
    min_m: int = 1
    max_m: int = 0
    constraints: str = ""


# Prepared weight layouts by name (a4w4_layout values).
_LAYOUTS = {"prepared_v2": 2, "prepared_v2_int8": 3}


class PreparedWeight:
    """A GEMM weight B rearranged by :func:`prepare_weight`: pass it as ``b`` to :func:`gemm`
    (with ``b_scale=None``). ``weight`` and ``scales`` are flat uint8 arrays in the framework and
    on the device of the plain weight; ``shape`` is the logical [N, K]; ``layout`` is
    "prepared_v2" or "prepared_v2_int8" (with B's int8 form, docs/weight-layout.md)."""

    __slots__ = ("weight", "scales", "n", "k", "layout")

    def __init__(
        self, weight: Any, scales: Any, n: int, k: int, layout: str = "prepared_v2"
    ) -> None:
        if layout not in _LAYOUTS:
            raise UnsupportedLayoutError(
                f"layout: expected one of {sorted(_LAYOUTS)}, got {layout!r}", 4
            )
        self.weight, self.scales, self.n, self.k = weight, scales, int(n), int(k)
        self.layout = layout

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    def __repr__(self) -> str:
        return f"PreparedWeight(n={self.n}, k={self.k}, layout={self.layout!r})"


class Context:
    """Owns an a4w4 context: the backend choice ("auto" follows the tensors' device, "cpu",
    "cuda") and the CPU thread count (0: one per hardware thread). Thread-safe; the module-level
    functions use :func:`default_context`. Methods mirror the module functions."""

    def __init__(
        self, *, backend: str = "auto", num_threads: int = 0, tuned: str | None = None
    ) -> None:
        self._ctx = _core.Context()
        self._workspace: Any = None
        if backend != "auto":
            self._ctx.backend = backend
        if num_threads:
            self._ctx.num_threads = num_threads
        if tuned is not None:
            self.load_tuned(tuned)

    def load_tuned(self, path: str | os.PathLike[str]) -> None:
        """Loads a tuned-kernel configuration (CSV, docs/kernels-and-tuning.md) for the GEMMs of
        this context, replacing any loaded before. A malformed file raises ConfigError
        ("file:line: what is wrong") and keeps the previous configuration; entries naming an
        unknown or inapplicable kernel are skipped with a warning (:attr:`tuned_warnings`);
        entries for other devices are ignored. The environment variable A4W4_TUNED_CONFIG is
        read when a context is created."""
        self._ctx.load_tuned(os.fspath(path))

    def clear_tuned(self) -> None:
        """Drops the tuned configuration: the heuristic chooses from then on."""
        self._ctx.clear_tuned()

    @property
    def tuned_entries(self) -> int:
        """Entries of the loaded configuration for this machine's devices (skipped entries
        included: :attr:`tuned_warnings` names them); other devices' entries are not counted."""
        return self._ctx.tuned_entries

    @property
    def tuned_warnings(self) -> list[str]:
        """Warnings recorded for the loaded configuration (skipped entries, by file:line)."""
        return self._ctx.tuned_warnings

    @property
    def backend(self) -> str:
        return self._ctx.backend

    @backend.setter
    def backend(self, name: str) -> None:
        self._ctx.backend = name

    @property
    def num_threads(self) -> int:
        return self._ctx.num_threads

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        self._ctx.num_threads = n

    def set_workspace(self, buffer: Any) -> None:
        """Device scratch memory for the kernels that stage operands (``cuda.int8_128x128``, and
        ``cuda.skinny``'s activations, which it needs above M = 64): a
        contiguous 1-D CUDA array of at least :func:`gemm_workspace_size` bytes, e.g.
        ``torch.empty(n, dtype=torch.uint8, device="cuda")``. The context keeps a reference to
        it. It must not overlap any operand, and calls that may use it must be ordered (one
        stream), as with cuBLAS. a4w4 never allocates inside a call."""
        self._ctx.set_workspace(buffer)
        self._workspace = buffer

    def clear_workspace(self) -> None:
        """Removes the workspace (the staging kernels then no longer run)."""
        self._ctx.clear_workspace()
        self._workspace = None

    def close(self) -> None:
        """Destroys the C context now (later calls on it raise InvalidArgumentError)."""
        self._ctx.close()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._ctx.closed:
            return "a4w4.Context(closed)"
        return f"a4w4.Context(backend={self.backend!r}, num_threads={self.num_threads})"

    def quantize(self, x: Any, mode: str = "rceil", **kw: Any) -> tuple[Any, Any]:
        return quantize(x, mode, context=self, **kw)

    def dequantize(self, fp4: Any, scales: Any, **kw: Any) -> Any:
        return dequantize(fp4, scales, context=self, **kw)

    def gemm(self, a: Any, a_scale: Any, b: Any, b_scale: Any, **kw: Any) -> Any:
        return gemm(a, a_scale, b, b_scale, context=self, **kw)

    def prepare_weight(self, b: Any, b_scale: Any, **kw: Any) -> PreparedWeight:
        return prepare_weight(b, b_scale, context=self, **kw)


_default: Context | None = None
_default_lock = threading.Lock()


def default_context() -> Context:
    """The context the module-level functions use when none is given (created on first use)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Context()
    return _default


def _ctx(context: Context | None) -> Any:
    return (context or default_context())._ctx


def _stream(adapter: _fw.Adapter, like: Any, stream: int | None) -> int:
    return adapter.stream(like) if stream is None else int(stream)


def _rows_cols(x: Any, name: str) -> tuple[int, int]:
    shape = _fw.shape_of(x, name)
    if len(shape) != 2:
        raise InvalidArgumentError(f"{name}: expected a 2-D array, got shape {list(shape)}", 1)
    return shape


def _fp4_rows_k(x: Any, name: str) -> tuple[int, int]:
    """Rows and logical K of a packed E2M1 operand: uint8 rows hold K/2 bytes; a DLPack
    float4_e2m1fn array (a dtype named float4_e2m1fn, not torch's ..._x2) counts elements."""
    rows, cols = _rows_cols(x, name)
    return rows, cols if _fw.counts_fp4_elements(x) else 2 * cols


def _out(adapter: _fw.Adapter, out: Any, dtype: int, name: str = "out") -> tuple[Any, int]:
    obj, code = _fw.export(out, _fw.FLOAT, name)
    return obj, (code or (dtype if adapter.name == "cupy" and dtype == _fw.BF16 else 0))


def quantize(
    x: Any,
    mode: str = "rceil",
    *,
    out: tuple[Any, Any] | None = None,
    context: Context | None = None,
    stream: int | None = None,
) -> tuple[Any, Any]:
    """Quantizes x [R, K] (float32, float16 or bfloat16; K % 32 == 0) to MXFP4.

    Returns ``(fp4, scales)``: packed E2M1 uint8 [R, K/2] and E8M0 uint8 [R, K/32], in x's
    framework and device. ``mode`` picks the scale exponent: "floor", "rceil" (default; never
    saturates) or "even" (docs/semantics.md). ``out`` may give both arrays to write into.
    ``stream``: a cudaStream_t as an int (default: the framework's current stream).
    """
    if mode not in _MODES:
        raise InvalidArgumentError(f"mode: expected 'floor', 'rceil' or 'even', got {mode!r}", 1)
    ad = _fw.adapter_for(x)
    rows, k = _rows_cols(x, "x")
    if out is None:
        q = ad.empty((rows, k // 2), _fw.U8, x)
        s = ad.empty((rows, -(-k // 32)), _fw.U8, x)
    else:
        q, s = out
    st = _stream(ad, x, stream)
    xo, xas = _fw.export(x, _fw.FLOAT, "x")
    qo, _ = _fw.export(q, _fw.FP4, "q")
    so, _ = _fw.export(s, _fw.SCALE, "scale")
    _core.quantize(_ctx(context), xo, xas, qo, so, _MODES[mode], st)
    if out is not None:
        return q, s
    return ad.finish((q, s), st, x)


def dequantize(
    fp4: Any,
    scales: Any,
    *,
    out_dtype: Any = "float32",
    out: Any = None,
    context: Context | None = None,
    stream: int | None = None,
) -> Any:
    """Decodes packed E2M1 fp4 [R, K/2] with E8M0 scales [R, K/32] to out_dtype [R, K]
    (float32, or bfloat16/float16 rounded to nearest even). A NaN scale (0xFF) gives NaN."""
    ad = _fw.adapter_for(fp4)
    rows, k = _fp4_rows_k(fp4, "fp4")
    dt = _fw.dtype_code(out_dtype if out is None else getattr(out, "dtype", out_dtype))
    y = ad.empty((rows, k), dt, fp4) if out is None else out
    st = _stream(ad, fp4, stream)
    qo, _ = _fw.export(fp4, _fw.FP4, "fp4")
    so, _ = _fw.export(scales, _fw.SCALE, "scales")
    yo, yas = _out(ad, y, dt)
    _core.dequantize(_ctx(context), qo, so, yo, yas, st)
    return y if out is not None else ad.finish(y, st, fp4)


def gemm(
    a: Any,
    a_scale: Any,
    b: Any,
    b_scale: Any,
    *,
    bias: Any = None,
    c: Any = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    out_dtype: Any = None,
    out: Any = None,
    split_k: int = 0,
    kernel: str | None = None,
    math_mode: str = "exact",
    b_constant: bool = False,
    context: Context | None = None,
    stream: int | None = None,
) -> Any:
    """D = alpha * A.B^T + beta * C + bias (docs/semantics.md).

    a: packed E2M1 [M, K/2] with a_scale [M, K/32]; b: [N, K/2] with b_scale [N, K/32], or a
    :class:`PreparedWeight` (then b_scale is None). bias [N] and c [M, N]: float32/bfloat16/
    float16, optional. The result [M, N] is ``out`` when given (written in place and returned),
    else a new array of ``out_dtype`` (default: out's dtype, else c's, else float32) in a's
    framework and device. ``split_k``: 0 automatic, n >= 1 n partitions of K. ``kernel``: the name
    of a registered kernel (see :func:`kernels`), never a silent fallback. ``math_mode``: "exact"
    or "fast_accum". ``b_constant``: promise that b and b_scale are not written while the call
    may run and that whatever last wrote them was synchronised with since (weights written at load
    time, as in inference), so that a CUDA kernel launched early may read them before the kernel
    ahead of it has finished (a4w4_gemm_options.b_constant, docs/semantics.md). ``stream``: a
    cudaStream_t as an int (default: the framework's current stream, e.g.
    torch.cuda.current_stream()).
    """
    if math_mode not in _MATH:
        raise InvalidArgumentError(
            f"math_mode: expected 'exact' or 'fast_accum', got {math_mode!r}", 1
        )
    ad = _fw.adapter_for(a)
    m, _ = _rows_cols(a, "a")
    prepared_n = prepared_k = 0
    prepared_layout = _LAYOUTS["prepared_v2"]
    if isinstance(b, PreparedWeight):
        if b_scale is not None:
            raise InvalidArgumentError(
                "b_scale: must be None when b is a PreparedWeight (it carries its scales)", 1
            )
        n, prepared_n, prepared_k = b.n, b.n, b.k
        prepared_layout = _LAYOUTS[b.layout]
        bo, _ = _fw.export(b.weight, _fw.FLOAT, "b")
        bso, _ = _fw.export(b.scales, _fw.FLOAT, "b_scale")
    else:
        n, _ = _rows_cols(b, "b")
        bo, _ = _fw.export(b, _fw.FP4, "b")
        bso, _ = _fw.export(b_scale, _fw.SCALE, "b_scale")
    if out is not None:
        dt = _fw.dtype_code(out.dtype)
        d = out
    else:
        spec = out_dtype if out_dtype is not None else (c.dtype if c is not None else "float32")
        dt = _fw.dtype_code(spec)
        d = ad.empty((m, n), dt, a)
    st = _stream(ad, a, stream)
    ao, _ = _fw.export(a, _fw.FP4, "a")
    aso, _ = _fw.export(a_scale, _fw.SCALE, "a_scale")
    co, cas = (None, 0) if c is None else _fw.export(c, _fw.FLOAT, "c")
    bio, bias_as = (None, 0) if bias is None else _fw.export(bias, _fw.FLOAT, "bias")
    do, das = _out(ad, d, dt)
    _core.gemm(
        _ctx(context), ao, aso, bo, bso, co, cas, bio, bias_as, do, das,
        float(alpha), float(beta), int(split_k), kernel, _MATH[math_mode], bool(b_constant),
        prepared_n, prepared_k, prepared_layout, st,
    )  # fmt: skip
    return d if out is not None else ad.finish(d, st, a)


def prepare_weight(
    b: Any,
    b_scale: Any,
    *,
    layout: str = "prepared_v2",
    context: Context | None = None,
    stream: int | None = None,
) -> PreparedWeight:
    """Rearranges a plain weight b [N, K/2] (packed E2M1) and b_scale [N, K/32] into the
    layout the GEMM kernels load fastest (``layout`` "prepared_v2", docs/weight-layout.md), or
    that layout with B's int8 form kept ("prepared_v2_int8": the CUDA int8 kernels then skip
    B's staging for batches from about 128 rows; about 2.9x the bytes). Prepare once at load
    time, then pass the result as ``b`` to :func:`gemm`."""
    if layout not in _LAYOUTS:
        raise UnsupportedLayoutError(
            f"layout: expected one of {sorted(_LAYOUTS)}, got {layout!r}", 4
        )
    ad = _fw.adapter_for(b)
    n, k = _fp4_rows_k(b, "b")
    wbytes, sbytes = _core.prepared_weight_size(n, k, _LAYOUTS[layout])
    pw = ad.empty((wbytes,), _fw.U8, b)
    ps = ad.empty((sbytes,), _fw.U8, b)
    st = _stream(ad, b, stream)
    bo, _ = _fw.export(b, _fw.FP4, "b")
    bso, _ = _fw.export(b_scale, _fw.SCALE, "b_scale")
    po, _ = _fw.export(pw, _fw.FLOAT, "prepared")
    pso, _ = _fw.export(ps, _fw.FLOAT, "prepared_scale")
    _core.prepare_weight(_ctx(context), bo, bso, po, pso, _LAYOUTS[layout], st)
    pw, ps = ad.finish((pw, ps), st, b)
    return PreparedWeight(pw, ps, n, k, layout)


def gemm_workspace_size(m: int, n: int, k: int) -> int:
    """Bytes of workspace (:meth:`Context.set_workspace`) with which every kernel can run an
    M x N x K GEMM: about (M + N) * K."""
    return int(_core.gemm_workspace_size(int(m), int(n), int(k)))


def backends() -> dict[str, BackendInfo]:
    """The backends of this build: compiled in, usable now, device count."""
    return {
        name: BackendInfo(
            name,
            _core.backend_compiled(name),
            _core.backend_available(name),
            _core.device_count(name),
        )
        for name in ("cpu", "cuda")
    }


def device_tuning_key(device: str = "cpu") -> tuple[str, int]:
    """The (name, multiprocessor count) that tuned-configuration entries for ``device`` ("cpu",
    "cuda" or "cuda:N") carry in their device and sm_count columns: ("cpu", hardware threads) on
    the CPU, ("NVIDIA H200", 132) on an H200."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda"):
        raise InvalidArgumentError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}", 1)
    return _core.device_tuning_key(1 if kind == "cpu" else 2, int(index or 0))


def kernels() -> list[KernelInfo]:
    """The registered GEMM kernels, in the order a4w4 tries them (names for ``gemm(kernel=)``)."""
    return [KernelInfo(*k) for k in _core.kernels()]


def pack_fp4(codes: Any) -> Any:
    """Packs E2M1 elements held one per byte (an ml_dtypes float4_e2m1fn array, or uint8 codes
    0..15) [.., K] into a4w4's packed form uint8 [.., K/2] (element 2i in the low nibble). NumPy
    only; a copy (layout, no rounding)."""
    import numpy as np

    arr = np.asarray(codes)
    if arr.dtype.itemsize != 1:
        raise UnsupportedDtypeError(
            f"codes: expected one byte per element, got dtype {arr.dtype}", 3
        )
    if arr.shape[-1] % 2:
        raise ShapeMismatchError(f"codes: the last dimension must be even, got {arr.shape}", 2)
    u = arr.view(np.uint8) & 0x0F
    return np.ascontiguousarray(u[..., 0::2] | (u[..., 1::2] << 4))


def unpack_fp4(fp4: Any) -> Any:
    """The inverse of :func:`pack_fp4`: uint8 codes [.., 2C] (view them as
    ml_dtypes.float4_e2m1fn for values). NumPy only."""
    import numpy as np

    p = np.asarray(fp4)
    if p.dtype != np.uint8:
        raise UnsupportedDtypeError(f"fp4: expected uint8, got dtype {p.dtype}", 3)
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), dtype=np.uint8)
    out[..., 0::2] = p & 0x0F
    out[..., 1::2] = p >> 4
    return out
