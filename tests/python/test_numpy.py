"""a4w4 from NumPy on the CPU backend, checked against ml_dtypes (an independent decoder)."""

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
import a4w4  # noqa: E402
from mx_check import decode_scales, dequant, expected_quantize  # noqa: E402


def mx_data(rows: int, k: int, seed: int = 0, spread: int = 20) -> np.ndarray:
    """Blocks of very different magnitudes, exact E2M1 ties, an all-zero block, signed zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    x *= (
        np.exp2(rng.integers(-spread, spread, size=(rows, k // 32, 1)))
        .repeat(32, axis=2)
        .reshape(rows, k)
    )
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], np.float32)
    x[0, :32] = np.tile(np.concatenate([ties, -ties]), 2)
    if k >= 64:
        x[0, 32:64] = 0.0
        x[0, 33] = -0.0
    x[1 % rows, :32] = np.float32(1e-3) * rng.standard_normal(32)
    return x


@pytest.mark.parametrize("mode", ["floor", "rceil", "even"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_quantize_matches_ml_dtypes(mode, dtype):
    x = mx_data(7, 256, spread=8 if dtype == np.float16 else 20).astype(dtype)
    q, s = a4w4.quantize(x, mode)
    assert q.dtype == np.uint8 and q.shape == (7, 128)
    assert s.dtype == np.uint8 and s.shape == (7, 8)
    eq, es = expected_quantize(x.astype(np.float32), mode)
    np.testing.assert_array_equal(s, es)
    np.testing.assert_array_equal(q, eq)


def test_nan_block_and_scale_decoding():
    x = mx_data(2, 64)
    x[1, 40] = np.nan
    q, s = a4w4.quantize(x)
    assert s[1, 1] == 0xFF and np.all(q[1, 16:32] == 0)
    assert np.isnan(decode_scales(s)[1, 1])
    y = a4w4.dequantize(q, s)
    assert np.all(np.isnan(y[1, 32:])) and not np.any(np.isnan(y[:, :32]))
    # E8M0 bytes decode as 2^(x-127), as ml_dtypes reads them
    all_bytes = np.arange(255, dtype=np.uint8)
    np.testing.assert_array_equal(decode_scales(all_bytes), np.exp2(all_bytes.astype(float) - 127))


@pytest.mark.parametrize("out_dtype", ["float32", "float16", "bfloat16"])
def test_dequantize_matches_ml_dtypes(out_dtype):
    q, s = a4w4.quantize(mx_data(5, 128, seed=3))
    y = a4w4.dequantize(q, s, out_dtype=out_dtype)
    assert y.shape == (5, 128)
    ref = dequant(q, s)
    want = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[out_dtype]
    assert y.dtype == want
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(y, ref.astype(want))


def quantized(rows, k, seed):
    return a4w4.quantize(np.random.default_rng(seed).standard_normal((rows, k)).astype(np.float32))


def rel_err(d, ref):
    return np.linalg.norm(d.astype(np.float64) - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("m,n,k", [(1, 64, 64), (3, 17, 96), (64, 128, 512)])
def test_gemm_against_float64(m, n, k):
    a, a_s = quantized(m, k, 1)
    b, b_s = quantized(n, k, 2)
    d = a4w4.gemm(a, a_s, b, b_s)
    assert d.dtype == np.float32 and d.shape == (m, n)
    ref = dequant(a, a_s) @ dequant(b, b_s).T
    assert rel_err(d, ref) < 1e-6
    # A constant B (a4w4_gemm_options.b_constant) changes nothing on the CPU.
    np.testing.assert_array_equal(a4w4.gemm(a, a_s, b, b_s, b_constant=True), d)


def test_gemm_epilogue_and_dtypes():
    a, a_s = quantized(9, 128, 3)
    b, b_s = quantized(33, 128, 4)
    rng = np.random.default_rng(5)
    bias = rng.standard_normal(33).astype(np.float32)
    c = rng.standard_normal((9, 33)).astype(np.float32)
    ref = 0.5 * (dequant(a, a_s) @ dequant(b, b_s).T) + 2.0 * c + bias
    d = a4w4.gemm(a, a_s, b, b_s, bias=bias, c=c, alpha=0.5, beta=2.0)
    assert rel_err(d, ref) < 1e-6
    for out_dtype, want, tol in [
        ("bfloat16", ml_dtypes.bfloat16, 4e-3),
        ("float16", np.float16, 1e-3),
    ]:
        d = a4w4.gemm(
            a, a_s, b, b_s, bias=bias.astype(want), c=c, alpha=0.5, beta=2.0, out_dtype=out_dtype
        )
        assert d.dtype == want
        assert rel_err(d.astype(np.float32), ref) < tol
    # c's dtype is the default output dtype; out= is written in place and returned
    out = np.full((9, 33), np.nan, np.float32)
    r = a4w4.gemm(a, a_s, b, b_s, c=c, beta=1.0, out=out)
    assert r is out and not np.any(np.isnan(out))
    # C = D in place
    d2 = c.copy()
    a4w4.gemm(a, a_s, b, b_s, c=d2, beta=1.0, out=d2)
    np.testing.assert_array_equal(d2, out)


def test_split_k_kernels_and_prepared_weight():
    a, a_s = quantized(4, 1024, 6)
    b, b_s = quantized(40, 1024, 7)
    ref = dequant(a, a_s) @ dequant(b, b_s).T
    base = a4w4.gemm(a, a_s, b, b_s)
    for split in (1, 4, 32):
        assert rel_err(a4w4.gemm(a, a_s, b, b_s, split_k=split), ref) < 1e-6
    for info in a4w4.kernels():
        if info.backend != "cpu":
            continue
        try:
            d = a4w4.gemm(a, a_s, b, b_s, kernel=info.name)
        except a4w4.KernelNotApplicableError:
            continue
        assert rel_err(d, ref) < 1e-6, info.name
    pw = a4w4.prepare_weight(b, b_s)
    assert pw.shape == (40, 1024) and pw.weight.dtype == np.uint8
    wbytes, sbytes = a4w4._core.prepared_weight_size(40, 1024, 2)
    assert pw.weight.nbytes == wbytes and pw.scales.nbytes == sbytes
    assert pw.layout == "prepared_v2"
    np.testing.assert_array_equal(a4w4.gemm(a, a_s, pw, None), base)
    with pytest.raises(a4w4.InvalidArgumentError):
        a4w4.gemm(a, a_s, pw, b_s)
    # With B's int8 form: version 2's bytes first, read as version 2 on the CPU (same D).
    p8 = a4w4.prepare_weight(b, b_s, layout="prepared_v2_int8")
    w8, s8 = a4w4._core.prepared_weight_size(40, 1024, 3)
    assert p8.layout == "prepared_v2_int8" and p8.weight.nbytes == w8 > 2 * wbytes
    np.testing.assert_array_equal(p8.weight[:wbytes], pw.weight)
    np.testing.assert_array_equal(p8.scales, pw.scales)
    np.testing.assert_array_equal(a4w4.gemm(a, a_s, p8, None), base)
    with pytest.raises(a4w4.UnsupportedLayoutError, match="layout"):
        a4w4.prepare_weight(b, b_s, layout="v3")


def test_strided_inputs_are_handled_without_copy():
    x = mx_data(8, 512)
    big = np.zeros((16, 1024), np.float32)
    big[::2, 256:768] = x
    view = big[::2, 256:768]  # row stride 2048 elements, last dimension contiguous
    q1, s1 = a4w4.quantize(view)
    q2, s2 = a4w4.quantize(x)
    np.testing.assert_array_equal(q1, q2)
    np.testing.assert_array_equal(s1, s2)
    # packed operands: whole blocks of columns, every other row
    a, a_s = quantized(10, 512, 8)
    b, b_s = quantized(6, 256, 9)
    d = a4w4.gemm(a[::2, :128], a_s[::2, :8], b, b_s)
    ref = (
        dequant(np.ascontiguousarray(a[::2, :128]), np.ascontiguousarray(a_s[::2, :8]))
        @ dequant(b, b_s).T
    )
    assert rel_err(d, ref) < 1e-6


def test_non_contiguous_last_dimension_is_refused():
    x = mx_data(4, 512)
    with pytest.raises(a4w4.UnsupportedLayoutError, match="contiguous"):
        a4w4.quantize(x[:, ::2])
    with pytest.raises(a4w4.UnsupportedLayoutError):
        a4w4.quantize(np.asfortranarray(x))
    a, a_s = quantized(4, 256, 1)
    with pytest.raises(a4w4.UnsupportedLayoutError):
        a4w4.gemm(a[:, ::2], a_s, a, a_s)


def test_read_only_inputs_and_ml_dtypes_forms():
    a, a_s = quantized(3, 128, 10)
    b, b_s = quantized(5, 128, 11)
    for arr in (a, a_s, b, b_s):
        arr.flags.writeable = False
    d = a4w4.gemm(a, a_s, b, b_s)
    # E8M0 scales as ml_dtypes.float8_e8m0fnu are read as the same bytes
    d2 = a4w4.gemm(a, a_s.view(ml_dtypes.float8_e8m0fnu), b, b_s.view(ml_dtypes.float8_e8m0fnu))
    np.testing.assert_array_equal(d, d2)
    # unpacked float4_e2m1fn (one element per byte) is refused, and pack_fp4 is the way in
    unpacked = a4w4.unpack_fp4(a).view(ml_dtypes.float4_e2m1fn)
    with pytest.raises(a4w4.UnsupportedDtypeError, match="pack_fp4"):
        a4w4.gemm(unpacked, a_s, b, b_s)
    np.testing.assert_array_equal(a4w4.pack_fp4(unpacked), a)
    # output arrays must be writable
    out = np.empty((3, 5), np.float32)
    out.flags.writeable = False
    with pytest.raises(TypeError):
        a4w4.gemm(a, a_s, b, b_s, out=out)


def test_pack_unpack_roundtrip():
    codes = np.random.default_rng(0).integers(0, 16, size=(4, 64)).astype(np.uint8)
    packed = a4w4.pack_fp4(codes)
    assert packed.shape == (4, 32)
    np.testing.assert_array_equal(packed[0, 0], codes[0, 0] | (codes[0, 1] << 4))
    np.testing.assert_array_equal(a4w4.unpack_fp4(packed), codes)


def test_backends_kernels_context():
    bk = a4w4.backends()
    assert bk["cpu"].compiled and bk["cpu"].available and bk["cpu"].device_count == 1
    assert bk["cuda"].compiled == a4w4._core.cuda_compiled
    names = [k.name for k in a4w4.kernels()]
    assert "cpu.reference" in names
    a, a_s = quantized(2, 64, 1)
    with a4w4.Context(num_threads=1, backend="cpu") as ctx:
        assert ctx.num_threads == 1 and ctx.backend == "cpu"
        d1 = ctx.gemm(a, a_s, a, a_s, kernel="cpu.reference")
        q, s = ctx.quantize(np.ones((2, 64), np.float32))
        assert ctx.dequantize(q, s).shape == (2, 64)
    np.testing.assert_array_equal(d1, a4w4.gemm(a, a_s, a, a_s, kernel="cpu.reference"))
    assert "closed" in repr(ctx)
    with pytest.raises(a4w4.InvalidArgumentError, match="closed"):
        ctx.gemm(a, a_s, a, a_s)
    assert a4w4.__version__.count(".") == 2


def test_generic_dlpack_producer_gets_dlpack_output():
    """An object that only speaks DLPack: its result is a DLPack-capable array."""

    class Producer:
        def __init__(self, arr):
            self.arr = arr
            self.shape = arr.shape

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    x = mx_data(4, 64)
    q, s = a4w4.quantize(Producer(x))
    assert hasattr(q, "__dlpack__") and not isinstance(q, np.ndarray)
    q2, s2 = a4w4.quantize(x)
    np.testing.assert_array_equal(np.from_dlpack(q), q2)
    np.testing.assert_array_equal(np.from_dlpack(s), s2)


def test_dlpack_float4_e2m1fn_operands_count_elements():
    """A DLPack float4_e2m1fn array (code 17, 4 bits) has its shape in elements, not bytes."""
    x = mx_data(4, 128)
    q_ref, s_ref = a4w4.quantize(x)
    q = a4w4._core.empty([4, 128], 17, 4, 1, 0)  # 4-bit elements, 64 bytes a row
    s = a4w4._core.empty([4, 4], 1, 8, 1, 0)
    a4w4._core.quantize(a4w4.default_context()._ctx, x, 0, q, s, 1, 0)
    assert a4w4._core.dlpack_info(q)[0] == [4, 128]
    y = a4w4.dequantize(q, s)
    np.testing.assert_array_equal(np.from_dlpack(y), a4w4.dequantize(q_ref, s_ref))
    d = a4w4.gemm(q, s, q_ref, s_ref)
    np.testing.assert_array_equal(np.from_dlpack(d), a4w4.gemm(q_ref, s_ref, q_ref, s_ref))


def test_kernel_metadata():
    by_name = {k.name: k for k in a4w4.kernels()}
    ref = by_name["cpu.reference"]
    assert ref.backend == "cpu" and ref.path == "cpu" and ref.min_m == 1
    assert isinstance(ref.constraints, str)
    if "cuda.decode" in by_name:
        decode = by_name["cuda.decode"]
        assert decode.path == "decode" and decode.max_m == 64 and decode.auto_split_k


def test_tuned_configuration(tmp_path):
    name, count = a4w4.device_tuning_key("cpu")
    assert name == "cpu" and count >= 1
    header = "device,sm_count,M,N,K,kernel,split_k,us,tflops\n"
    good = tmp_path / "tuned.csv"
    good.write_text(
        header
        + f"{name},{count},2,64,64,cpu.reference,1,1.0,0.1\n"
        + f"{name},{count},4,64,64,cpu.no_such_kernel,0,1.0,0.1\n"
        + "Some GPU,99,2,64,64,cuda.decode,0,1.0,0.1\n"
    )
    a, a_s = quantized(2, 64, 1)
    with a4w4.Context(backend="cpu", tuned=good) as ctx:
        # Both entries for this machine count; the stale one is skipped with a warning naming it,
        # the other device's entry is ignored.
        assert ctx.tuned_entries == 2
        assert len(ctx.tuned_warnings) == 1 and "cpu.no_such_kernel" in ctx.tuned_warnings[0]
        d = ctx.gemm(a, a_s, a, a_s)
        np.testing.assert_array_equal(d, a4w4.gemm(a, a_s, a, a_s, kernel="cpu.reference"))
        ctx.clear_tuned()
        assert ctx.tuned_entries == 0 and ctx.tuned_warnings == []
        bad = tmp_path / "bad.csv"
        bad.write_text(header + f"{name},{count},two,64,64,cpu.reference,1,1.0,0.1\n")
        with pytest.raises(a4w4.ConfigError, match=r"bad\.csv:2"):
            ctx.load_tuned(bad)
    with pytest.raises(a4w4.InvalidArgumentError, match="device"):
        a4w4.device_tuning_key("tpu")
