"""Array frameworks: how arguments are handed to the extension (zero-copy, through DLPack) and
how outputs are allocated in the caller's framework.

Each adapter answers for one framework: NumPy, PyTorch, CuPy, JAX, and any other object that
speaks DLPack (``__dlpack__`` / ``__dlpack_device__``). Nothing here computes: the only work is
reinterpreting dtypes that DLPack cannot carry (ml_dtypes' bfloat16 and float8_e8m0fnu, torch's
float8_e8m0fnu and float4_e2m1fn_x2) as raw bytes of the same bits.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import _core
from ._errors import DeviceMismatchError, InvalidArgumentError, UnsupportedDtypeError

# a4w4_dtype codes (a4w4.h)
E2M1, E8M0, BF16, F16, F32, U8 = 1, 2, 3, 4, 5, 6
# Roles an argument plays; the first two fix how its bytes are read.
FP4, SCALE, FLOAT = "fp4", "scale", "float"

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3

_NAMES = {E2M1: "e2m1", E8M0: "e8m0", BF16: "bfloat16", F16: "float16", F32: "float32", U8: "uint8"}


def dtype_code(spec: Any) -> int:
    """An output dtype given as a string, a NumPy / ml_dtypes dtype or a torch dtype."""
    text = str(spec).lower()
    if text.startswith("torch."):
        text = text[len("torch.") :]
    if "dtype(" in text:  # jax / numpy reprs
        text = text.split("(")[-1].strip("')\"")
    table = {
        "float32": F32, "fp32": F32, "f32": F32, "float": F32, "<f4": F32,
        "bfloat16": BF16, "bf16": BF16,
        "float16": F16, "fp16": F16, "f16": F16, "half": F16, "<f2": F16,
    }  # fmt: skip
    if text in table:
        return table[text]
    try:
        name = np.dtype(spec).name
    except TypeError:
        name = text
    if name in table:
        return table[name]
    raise UnsupportedDtypeError(
        f"out_dtype: expected float32, bfloat16 or float16, got {spec!r}", 3
    )


def _module_of(x: Any) -> str:
    return type(x).__module__.split(".")[0]


class Adapter:
    """The generic adapter: any DLPack producer. Outputs are nanobind arrays (DLPack-capable)."""

    name = "dlpack"

    def device(self, x: Any) -> tuple[int, int]:
        if hasattr(x, "__dlpack_device__"):
            t, i = x.__dlpack_device__()
            return int(t), int(i)
        return KDL_CPU, 0

    def stream(self, x: Any) -> int:
        return 0  # the legacy default stream; outputs are synchronised in finish()

    def export(self, x: Any, role: str, name: str) -> tuple[Any, int]:
        """(object for the extension, dtype override: a4w4 dtype code or 0)."""
        dev = self.device(x)
        if dev[0] == KDL_CUDA and hasattr(x, "__dlpack__"):
            try:  # make the data ready on the legacy default stream, which the call uses
                return x.__dlpack__(stream=1), _role_code(role)
            except (TypeError, BufferError):
                pass
        return x, _role_code(role)

    def empty(self, shape: tuple[int, ...], dtype: int, like: Any) -> Any:
        code, bits = (1, 8) if dtype in (E2M1, E8M0, U8) else _core.dtype_to_dlpack(dtype)
        dev_type, dev_id = self.device(like)
        if dev_type == KDL_CUDA_HOST:
            dev_type = KDL_CPU
        return _core.empty(list(shape), code, bits, dev_type, dev_id)

    def as_writable(self, out: Any, dtype: int) -> tuple[Any, int]:
        return out, 0

    def finish(self, result: Any, stream: int, like: Any) -> Any:
        if self.device(like)[0] == KDL_CUDA:
            _core.synchronize(stream)
        return result


def _role_code(role: str) -> int:
    return {FP4: E2M1, SCALE: E8M0}.get(role, 0)


class NumpyAdapter(Adapter):
    name = "numpy"

    def device(self, x: Any) -> tuple[int, int]:
        return KDL_CPU, 0

    def export(self, x: Any, role: str, name: str) -> tuple[Any, int]:
        if not isinstance(x, np.ndarray):
            x = np.asarray(x)
        dt = x.dtype
        if dt.kind == "V" or dt.name in ("bfloat16", "float8_e8m0fnu", "float4_e2m1fn"):
            if dt.name == "bfloat16" and role == FLOAT:
                return x.view(np.uint16), BF16
            if dt.name == "float8_e8m0fnu" and role == SCALE:
                return x.view(np.uint8), E8M0
            if dt.name == "float4_e2m1fn":
                raise UnsupportedDtypeError(
                    f"{name}: an ml_dtypes float4_e2m1fn array holds one element per byte; a4w4 "
                    "takes packed E2M1 (two per byte): pass a4w4.pack_fp4(arr)",
                    3,
                )
            raise UnsupportedDtypeError(f"{name}: NumPy dtype {dt} is not one a4w4 takes", 3)
        return x, _role_code(role)

    def empty(self, shape: tuple[int, ...], dtype: int, like: Any) -> Any:
        if dtype == BF16:
            try:
                import ml_dtypes
            except ImportError as e:
                raise UnsupportedDtypeError(
                    "out_dtype: bfloat16 NumPy arrays need ml_dtypes (pip install ml_dtypes), or "
                    "ask for float32",
                    3,
                ) from e
            return np.empty(shape, dtype=ml_dtypes.bfloat16)
        np_dtype = {F32: np.float32, F16: np.float16}.get(dtype, np.uint8)
        return np.empty(shape, dtype=np_dtype)

    def finish(self, result: Any, stream: int, like: Any) -> Any:
        return result


def _torch_byte_view(t: Any, role: str, name: str) -> tuple[Any, int]:
    import torch

    t = t.detach()
    dname = str(t.dtype).replace("torch.", "")
    if dname in ("float8_e8m0fnu",) and role == SCALE:
        t = t.view(torch.uint8)
    elif dname in ("float4_e2m1fn_x2",) and role == FP4:
        t = t.view(torch.uint8)
    elif dname.startswith(("float8", "float4")):
        raise UnsupportedDtypeError(f"{name}: torch dtype {t.dtype} is not one a4w4 takes here", 3)
    return t, _role_code(role)


class TorchAdapter(Adapter):
    name = "torch"

    def device(self, x: Any) -> tuple[int, int]:
        if x.device.type == "cuda":
            return KDL_CUDA, x.device.index if x.device.index is not None else 0
        if x.device.type != "cpu":
            raise DeviceMismatchError(f"torch device {x.device} is not supported (cpu or cuda)", 8)
        return KDL_CPU, 0

    def stream(self, x: Any) -> int:
        import torch

        if x.device.type == "cuda":
            return int(torch.cuda.current_stream(x.device).cuda_stream)
        return 0

    def export(self, x: Any, role: str, name: str) -> tuple[Any, int]:
        import torch

        if not isinstance(x, torch.Tensor):
            return Adapter.export(self, x, role, name)
        t, code = _torch_byte_view(x, role, name)
        # A capsule from to_dlpack: zero-copy and no stream synchronisation (graph-capture safe).
        to_dlpack = getattr(torch.utils.dlpack, "to_dlpack", None)
        if to_dlpack is not None:
            return to_dlpack(t), code
        return t.__dlpack__(stream=-1), code

    def empty(self, shape: tuple[int, ...], dtype: int, like: Any) -> Any:
        import torch

        tdt = {F32: torch.float32, BF16: torch.bfloat16, F16: torch.float16}.get(dtype, torch.uint8)
        return torch.empty(shape, dtype=tdt, device=like.device)

    def finish(self, result: Any, stream: int, like: Any) -> Any:
        return result  # queued on the current torch stream, like any torch op


class CupyAdapter(Adapter):
    name = "cupy"

    def stream(self, x: Any) -> int:
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)

    def export(self, x: Any, role: str, name: str) -> tuple[Any, int]:
        s = self.stream(x)
        try:
            return x.__dlpack__(stream=s if s else 1), _role_code(role)
        except (TypeError, BufferError, AttributeError):
            return x, _role_code(role)

    def empty(self, shape: tuple[int, ...], dtype: int, like: Any) -> Any:
        import cupy

        # CuPy has no bfloat16: bf16 results come back as their uint16 bits.
        cdt = {F32: cupy.float32, F16: cupy.float16, BF16: cupy.uint16}.get(dtype, cupy.uint8)
        with cupy.cuda.Device(self.device(like)[1]):
            return cupy.empty(shape, dtype=cdt)

    def as_writable(self, out: Any, dtype: int) -> tuple[Any, int]:
        return out, (BF16 if dtype == BF16 else 0)

    def finish(self, result: Any, stream: int, like: Any) -> Any:
        return result  # queued on CuPy's current stream


class JaxAdapter(Adapter):
    """JAX arrays are immutable: outputs are written into fresh buffers and handed to
    jax.dlpack.from_dlpack (zero-copy where JAX accepts the buffer)."""

    name = "jax"

    def export(self, x: Any, role: str, name: str) -> tuple[Any, int]:
        x.block_until_ready()
        return x.__dlpack__(), _role_code(role)

    def finish(self, result: Any, stream: int, like: Any) -> Any:
        import jax
        import jax.dlpack

        Adapter.finish(self, result, stream, like)
        # __dlpack__ objects are accepted by current JAX; put the result on the input's device.
        dev = next(iter(like.devices()))
        if isinstance(result, tuple):
            return tuple(jax.device_put(jax.dlpack.from_dlpack(r), dev) for r in result)
        return jax.device_put(jax.dlpack.from_dlpack(result), dev)


_NUMPY = NumpyAdapter()
_GENERIC = Adapter()
_TORCH = TorchAdapter()
_CUPY = CupyAdapter()
_JAX = JaxAdapter()


def adapter_for(x: Any) -> Adapter:
    """The framework of an array; unknown non-DLPack objects are read as NumPy arrays."""
    if isinstance(x, np.ndarray):
        return _NUMPY
    mod = _module_of(x)
    if mod == "torch" and "torch" in sys.modules:
        return _TORCH
    if mod == "cupy":
        return _CUPY
    if mod in ("jax", "jaxlib"):
        return _JAX
    if hasattr(x, "__dlpack__"):
        return _GENERIC
    return _NUMPY


def export(x: Any, role: str, name: str) -> tuple[Any, int]:
    """Hands an input to the extension: (object, dtype override)."""
    if x is None:
        raise InvalidArgumentError(f"{name}: must not be None", 1)
    return adapter_for(x).export(x, role, name)


def shape_of(x: Any, name: str) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None:
        shape = _core.dlpack_info(x)[0] if hasattr(x, "__dlpack__") else np.asarray(x).shape
    return tuple(int(s) for s in shape)


def counts_fp4_elements(x: Any) -> bool:
    """Whether a packed-E2M1 operand's shape counts 4-bit elements (a DLPack float4_e2m1fn
    array) rather than bytes (uint8, torch float4_e2m1fn_x2)."""
    if isinstance(x, np.ndarray) or _module_of(x) in ("torch", "cupy", "jax", "jaxlib"):
        dt = str(getattr(x, "dtype", ""))
        return "float4_e2m1fn" in dt and "x2" not in dt
    if hasattr(x, "__dlpack__"):
        code, bits, _ = _core.dlpack_info(x)[1]
        return code == 17 and bits == 4
    return False


def dtype_name(code: int) -> str:
    return _NAMES.get(code, "invalid")
