"""C API failures surface as a4w4.Error subclasses carrying the status code and the C message."""

import pickle

import a4w4
import numpy as np
import pytest
from a4w4 import Status


def operands(m=4, n=8, k=128):
    rng = np.random.default_rng(0)
    a, a_s = a4w4.quantize(rng.standard_normal((m, k)).astype(np.float32))
    b, b_s = a4w4.quantize(rng.standard_normal((n, k)).astype(np.float32))
    return a, a_s, b, b_s


def test_every_status_has_its_class():
    for status in Status:
        if status == Status.SUCCESS:
            continue
        err = a4w4._errors.error_from_status(int(status), "detail")
        assert isinstance(err, a4w4.Error)
        assert err.status is status and err.message == "detail"
        assert str(err) == f"A4W4_ERROR_{status.name}: detail"
        # the C API names the same status
        assert a4w4._core.status_string(int(status)).startswith(f"A4W4_ERROR_{status.name}")
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and again.status == err.status
    unknown = a4w4._errors.error_from_status(99, "x")
    assert type(unknown) is a4w4.Error and unknown.status == 99


def test_idiomatic_bases():
    assert issubclass(a4w4.ShapeMismatchError, ValueError)
    assert issubclass(a4w4.InvalidArgumentError, ValueError)
    assert issubclass(a4w4.UnsupportedDtypeError, TypeError)
    assert issubclass(a4w4.KernelNotFoundError, LookupError)
    assert issubclass(a4w4.OutOfMemoryError, MemoryError)
    assert issubclass(a4w4.NoDeviceError, RuntimeError)


def test_shape_mismatch_carries_the_c_message():
    a, a_s, b, b_s = operands()
    with pytest.raises(a4w4.ShapeMismatchError) as e:
        a4w4.gemm(a, a_s, b[:, :32], b_s)
    assert e.value.status == Status.SHAPE_MISMATCH
    assert e.value.message.startswith("a4w4_gemm: ")  # the C API's own message
    with pytest.raises(ValueError):
        a4w4.gemm(a, a_s[:, :2], b, b_s)


def test_k_not_multiple_of_32():
    with pytest.raises(a4w4.KNotMultipleOf32Error) as e:
        a4w4.quantize(np.zeros((2, 48), np.float32))
    assert e.value.status == 5 and "multiple of the 32" in e.value.message


def test_unsupported_dtype():
    with pytest.raises(a4w4.UnsupportedDtypeError, match="x: ") as e:
        a4w4.quantize(np.zeros((2, 64), np.float64))
    assert isinstance(e.value, TypeError)
    a, a_s, b, b_s = operands()
    with pytest.raises(a4w4.UnsupportedDtypeError):
        a4w4.gemm(a.astype(np.float32), a_s, b, b_s)
    with pytest.raises(a4w4.UnsupportedDtypeError):
        a4w4.gemm(a, a_s, b, b_s, bias=np.zeros(8, np.int32))
    with pytest.raises(a4w4.UnsupportedDtypeError, match="out_dtype"):
        a4w4.gemm(a, a_s, b, b_s, out_dtype="int8")


def test_invalid_arguments():
    a, a_s, b, b_s = operands(k=64)
    with pytest.raises(a4w4.InvalidArgumentError) as e:
        a4w4.gemm(a, a_s, b, b_s, split_k=3)  # K/32 = 2 blocks
    assert "split_k" in e.value.message
    with pytest.raises(a4w4.InvalidArgumentError, match="mode"):
        a4w4.quantize(np.zeros((2, 64), np.float32), mode="nearest")
    with pytest.raises(a4w4.InvalidArgumentError, match="2-D"):
        a4w4.quantize(np.zeros(64, np.float32))
    with pytest.raises(a4w4.InvalidArgumentError, match="backend"):
        a4w4.Context(backend="tpu")


def test_kernels_not_found_or_not_applicable():
    a, a_s, b, b_s = operands()
    with pytest.raises(a4w4.KernelNotFoundError, match="no_such_kernel"):
        a4w4.gemm(a, a_s, b, b_s, kernel="no_such_kernel")
    cuda_kernels = [k.name for k in a4w4.kernels() if k.backend == "cuda"]
    if cuda_kernels:  # a CUDA kernel on CPU tensors
        with pytest.raises((a4w4.KernelNotApplicableError, a4w4.DeviceMismatchError)):
            a4w4.gemm(a, a_s, b, b_s, kernel=cuda_kernels[0])


def test_workspace_size_and_host_workspaces():
    # About (M + N) * K bytes, K rounded up to 128, plus factors and summaries.
    assert a4w4.gemm_workspace_size(256, 512, 1024) >= 768 * 1024
    assert a4w4.gemm_workspace_size(1, 1, 32) >= 2 * 128
    with pytest.raises(a4w4.KNotMultipleOf32Error):
        a4w4.gemm_workspace_size(4, 4, 48)
    with pytest.raises(a4w4.InvalidArgumentError, match="m and n"):
        a4w4.gemm_workspace_size(0, 4, 64)
    ctx = a4w4.Context()
    # Host memory is not a workspace: refused where it is set.
    with pytest.raises(a4w4.InvalidArgumentError, match="CUDA device"):
        ctx.set_workspace(np.zeros(4096, np.uint8))
    with pytest.raises(a4w4.InvalidArgumentError, match="1-D"):
        ctx.set_workspace(np.zeros((4, 4), np.uint8))
    ctx.clear_workspace()  # removing none is fine


@pytest.mark.skipif(a4w4._core.cuda_compiled, reason="this build has the CUDA backend")
def test_backend_not_compiled():
    with pytest.raises(a4w4.BackendNotCompiledError) as e:
        a4w4.Context(backend="cuda")
    assert e.value.status == Status.BACKEND_NOT_COMPILED


def test_failed_call_writes_nothing():
    a, a_s, b, b_s = operands()
    out = np.full((4, 8), 7.0, np.float32)
    with pytest.raises(a4w4.ShapeMismatchError):
        a4w4.gemm(a, a_s, b, b_s[:, :1], out=out)
    assert np.all(out == 7.0)
