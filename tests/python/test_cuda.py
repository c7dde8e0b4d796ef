"""a4w4 on a CUDA device from PyTorch (and CuPy where installed): device tensors in and out,
the current torch stream, CUDA graphs, torch.compile. Marked `cuda`: skipped without a GPU;
run on the GPU machine with scripts/device-python.sh."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import a4w4  # noqa: E402
import a4w4.torch as at  # noqa: E402

pytestmark = pytest.mark.cuda


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm()).item()


def quantized(m, k, seed, device="cuda"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    return a4w4.quantize(x.to(device))


def test_device_tensors_in_and_out_match_the_cpu():
    x = torch.randn(33, 512, generator=torch.Generator().manual_seed(0))
    q, s = a4w4.quantize(x.cuda())
    assert q.is_cuda and s.is_cuda and q.device == torch.device("cuda", 0)
    qc, sc = a4w4.quantize(x)
    assert torch.equal(q.cpu(), qc) and torch.equal(s.cpu(), sc)
    for dt in (torch.bfloat16, torch.float16):
        qd, sd = a4w4.quantize(x.to(dt).cuda())
        qh, sh = a4w4.quantize(x.to(dt))
        assert torch.equal(qd.cpu(), qh) and torch.equal(sd.cpu(), sh)
    y = a4w4.dequantize(q, s, out_dtype=torch.bfloat16)
    assert y.is_cuda and torch.equal(y.cpu(), a4w4.dequantize(qc, sc, out_dtype=torch.bfloat16))
    w = torch.randn(96, 512, generator=torch.Generator().manual_seed(1))
    wq, ws = a4w4.quantize(w.cuda())
    bias = torch.randn(96)
    for out_dtype, tol in ((torch.float32, 1e-6), (torch.bfloat16, 4e-3), (torch.float16, 1e-3)):
        d = a4w4.gemm(q, s, wq, ws, bias=bias.cuda(), out_dtype=out_dtype)
        assert d.is_cuda and d.dtype == out_dtype and d.shape == (33, 96)
        ref = a4w4.gemm(qc, sc, wq.cpu(), ws.cpu(), bias=bias, out_dtype=torch.float32)
        assert rel(d, ref) < tol


@pytest.mark.parametrize("layout", ["prepared_v2", "prepared_v2_int8"])
@pytest.mark.parametrize("m", [1, 4, 16, 128, 300])
def test_prepared_weight_on_device(m, layout):
    a, a_s = quantized(m, 2048, 2)
    b, b_s = quantized(1024, 2048, 3)
    pw = a4w4.prepare_weight(b, b_s, layout=layout)
    assert pw.weight.is_cuda and pw.layout == layout
    plain = a4w4.gemm(a, a_s, b, b_s, out_dtype=torch.bfloat16)
    prepared = a4w4.gemm(a, a_s, pw, None, out_dtype=torch.bfloat16)
    ref = a4w4.gemm(a.cpu(), a_s.cpu(), b.cpu(), b_s.cpu())
    assert rel(plain, ref) < 4e-3 and rel(prepared, ref) < 4e-3
    # A constant weight (b_constant): the same result.
    constant = a4w4.gemm(a, a_s, pw, None, out_dtype=torch.bfloat16, b_constant=True)
    assert torch.equal(constant, prepared)
    if layout == "prepared_v2_int8":
        # The int8 kernels read its int8 part (with a workspace for A's staging).
        ctx = a4w4.Context()
        buf = torch.empty(a4w4.gemm_workspace_size(m, 1024, 2048), dtype=torch.uint8, device="cuda")
        ctx.set_workspace(buf)
        if m > 128:
            d = a4w4.gemm(a, a_s, pw, None, kernel="cuda.int8_128x128", context=ctx)
            assert rel(d, ref) < 1e-6


def test_staging_kernel_with_a_torch_workspace():
    # cuda.int8_128x128 stages A and B in the context's workspace (a torch buffer here): refused
    # without one, then as exact as the reference with one.
    a, a_s = quantized(200, 1024, 4)
    b, b_s = quantized(136, 1024, 5)
    ctx = a4w4.Context()
    with pytest.raises(a4w4.KernelNotApplicableError, match="workspace"):
        a4w4.gemm(a, a_s, b, b_s, kernel="cuda.int8_128x128", context=ctx)
    buf = torch.empty(a4w4.gemm_workspace_size(200, 136, 1024), dtype=torch.uint8, device="cuda")
    ctx.set_workspace(buf)
    d = a4w4.gemm(a, a_s, b, b_s, kernel="cuda.int8_128x128", context=ctx)
    ref = a4w4.gemm(a.cpu(), a_s.cpu(), b.cpu(), b_s.cpu())
    assert rel(d, ref) < 1e-6
    ctx.clear_workspace()
    with pytest.raises(a4w4.KernelNotApplicableError):
        a4w4.gemm(a, a_s, b, b_s, kernel="cuda.int8_128x128", context=ctx)


def test_runs_on_the_current_torch_stream():
    side = torch.cuda.Stream()
    x_host = torch.randn(4096, 4096, generator=torch.Generator().manual_seed(4))
    q_ref, s_ref = a4w4.quantize(x_host)
    with torch.cuda.stream(side):
        # produced on `side`, consumed on `side` with no synchronisation in between: only
        # correct if a4w4 runs on the current stream
        x = x_host.to("cuda", non_blocking=False) * 1.0
        q, s = a4w4.quantize(x)
        y = a4w4.dequantize(q, s)
    side.synchronize()
    assert torch.equal(q.cpu(), q_ref) and torch.equal(s.cpu(), s_ref)
    assert torch.equal(y.cpu(), a4w4.dequantize(q_ref, s_ref))
    # an explicit stream argument is honoured too
    q2, s2 = a4w4.quantize(x, stream=side.cuda_stream)
    side.synchronize()
    assert torch.equal(q2.cpu(), q_ref)


def test_device_mismatch_is_an_error():
    a, a_s = quantized(4, 128, 5)
    with pytest.raises(a4w4.DeviceMismatchError):
        a4w4.gemm(a, a_s, a.cpu(), a_s.cpu())


def make_linear(n=1024, k=2048, dtype=torch.bfloat16):
    torch.manual_seed(6)
    lin = torch.nn.Linear(k, n, dtype=dtype, device="cuda")
    return lin, at.MXFP4Linear.from_linear(lin)


def test_mxfp4_linear_on_cuda_uses_prepared_weights():
    lin, m = make_linear()
    assert m.weight_prepared is not None and m.weight_prepared.is_cuda
    x = torch.randn(3, 5, 2048, device="cuda", dtype=torch.bfloat16)
    y = m(x)
    assert y.shape == (3, 5, 1024) and y.dtype == torch.bfloat16 and y.is_cuda
    q, s = a4w4.quantize(x.reshape(15, 2048).float().cpu())
    ref = a4w4.gemm(q, s, m.weight_fp4.cpu(), m.weight_scale.cpu(), bias=m.bias.float().cpu())
    assert rel(y.reshape(15, 1024), ref) < 4e-3
    assert rel(y, lin(x)) < 0.25


def test_mxfp4_linear_constant_weight():
    # constant_weight (a4w4.gemm's b_constant): the same results, at M = 1 (the GEMV that reads
    # the weight early) and above, after construction and after load_state_dict.
    lin, m = make_linear(n=8192, k=8192)
    mc = at.MXFP4Linear.from_linear(lin, constant_weight=True)
    assert "constant_weight=True" in repr(mc)
    for rows in (1, 16):
        x = torch.randn(rows, 8192, device="cuda", dtype=torch.bfloat16)
        assert torch.equal(mc(x), m(x))
    other = at.MXFP4Linear.from_linear(
        torch.nn.Linear(8192, 8192, device="cuda", dtype=torch.bfloat16)
    )
    mc.load_state_dict(other.state_dict())
    x = torch.randn(1, 8192, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(mc(x), other(x))


def test_mxfp4_linear_fast_accumulation():
    # 200 rows on a prepared weight with a workspace: cuda.skinny's FP8 path (fast accumulation);
    # close to the exact result (its bound: 2^-5 of the sum of |products| per element) and, from
    # the first call on, deterministic.
    lin, exact = make_linear(n=1024, k=2048, dtype=torch.float32)
    fast = at.MXFP4Linear.from_linear(lin, math_mode="fast_accum")
    ctx = a4w4.default_context()
    buf = torch.empty(a4w4.gemm_workspace_size(200, 1024, 2048), dtype=torch.uint8, device="cuda")
    ctx.set_workspace(buf)
    try:
        x = torch.randn(200, 2048, device="cuda", generator=torch.Generator("cuda").manual_seed(7))
        y_exact, y_fast = exact(x), fast(x)
        assert rel(y_fast, y_exact) < 1e-3
        assert torch.equal(fast(x), y_fast)
    finally:
        ctx.clear_workspace()


def test_mxfp4_linear_with_the_int8_weight_form():
    # prepare_layout "prepared_v2_int8": 300 rows with a workspace run the int8 kernel on the
    # weight's int8 part; the same result as the version-2 weight (both exact), also compiled.
    lin, v2 = make_linear(n=1024, k=2048, dtype=torch.float32)
    int8 = at.MXFP4Linear.from_linear(lin, prepare_layout="prepared_v2_int8")
    assert "prepared_v2_int8" in repr(int8)
    ctx = a4w4.default_context()
    buf = torch.empty(a4w4.gemm_workspace_size(300, 1024, 2048), dtype=torch.uint8, device="cuda")
    ctx.set_workspace(buf)
    try:
        x = torch.randn(300, 2048, device="cuda", generator=torch.Generator("cuda").manual_seed(8))
        y = int8(x)
        assert rel(y, v2(x)) < 1e-6
        assert torch.equal(torch.compile(int8)(x), y)
    finally:
        ctx.clear_workspace()


def test_cuda_graph_capture_and_replay():
    _, m = make_linear()
    static_x = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up outside capture
            m(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = m(static_x)
    for seed in range(3):
        new_x = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16,
                            generator=torch.Generator("cuda").manual_seed(seed))  # fmt: skip
        static_x.copy_(new_x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_y, m(new_x))


def test_torch_compile_fullgraph_and_cudagraphs():
    _, m = make_linear()
    x = torch.randn(4, 2048, device="cuda", dtype=torch.bfloat16)
    eager = m(x)
    assert torch.equal(torch.compile(m, fullgraph=True)(x), eager)
    torch._dynamo.reset()
    compiled = torch.compile(m, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        out = compiled(x)
    assert torch.equal(out, eager)


def test_no_leak_over_10k_device_calls():
    a, a_s = quantized(4, 256, 7)
    b, b_s = quantized(64, 256, 8)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(10_000):
        d = a4w4.gemm(a, a_s, b, b_s, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    del d
    assert torch.cuda.memory_allocated() == before


def test_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    x = np.random.default_rng(9).standard_normal((16, 256)).astype(np.float32)
    q, s = a4w4.quantize(cupy.asarray(x))
    assert isinstance(q, cupy.ndarray)
    qn, sn = a4w4.quantize(x)
    assert np.array_equal(cupy.asnumpy(q), qn) and np.array_equal(cupy.asnumpy(s), sn)
    d = a4w4.gemm(q, s, q, s)
    assert isinstance(d, cupy.ndarray)
    ref = a4w4.gemm(qn, sn, qn, sn)
    assert np.linalg.norm(cupy.asnumpy(d) - ref) <= 1e-6 * np.linalg.norm(ref)


def test_jax_gpu_arrays():
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX has no GPU here")
    x = np.random.default_rng(10).standard_normal((16, 256)).astype(np.float32)
    jq, js = a4w4.quantize(jax.device_put(x, gpu))
    qn, sn = a4w4.quantize(x)
    assert np.array_equal(np.asarray(jq), qn) and np.array_equal(np.asarray(js), sn)
