"""The PyTorch layer on the CPU: torch tensors in and out, custom ops, MXFP4Linear,
torch.compile(fullgraph=True)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import a4w4  # noqa: E402
import a4w4.torch as at  # noqa: E402

pytestmark = pytest.mark.torch


def test_torch_in_torch_out_zero_copy():
    x = torch.randn(6, 128)
    q, s = a4w4.quantize(x)
    assert isinstance(q, torch.Tensor) and q.dtype == torch.uint8 and q.shape == (6, 64)
    qn, sn = a4w4.quantize(x.numpy())
    assert np.array_equal(q.numpy(), qn) and np.array_equal(s.numpy(), sn)
    out = torch.empty(6, 6, dtype=torch.bfloat16)
    r = a4w4.gemm(q, s, q, s, out=out)
    assert r is out
    ref = a4w4.gemm(qn, sn, qn, sn)
    assert torch.allclose(out.float(), torch.from_numpy(ref).bfloat16().float())
    # torch's float8_e8m0fnu scales are read as their bytes
    if hasattr(torch, "float8_e8m0fnu"):
        d = a4w4.gemm(q, s.view(torch.float8_e8m0fnu), q, s)
        assert torch.equal(d, torch.from_numpy(ref))
    # bf16 and fp16 inputs
    for dt in (torch.bfloat16, torch.float16):
        qb, sb = a4w4.quantize(x.to(dt))
        qf, sf = a4w4.quantize(x.to(dt).float())
        assert torch.equal(qb, qf) and torch.equal(sb, sf)


def test_requires_grad_and_strided_views():
    x = torch.randn(8, 256, requires_grad=True)
    q, s = a4w4.quantize(x)  # detached, no copy
    big = torch.zeros(16, 512)
    big[::2, 128:384] = x.detach()
    q2, s2 = a4w4.quantize(big[::2, 128:384])
    assert torch.equal(q, q2) and torch.equal(s, s2)
    with pytest.raises(a4w4.UnsupportedLayoutError):
        a4w4.quantize(big[:8, ::2])


def test_custom_ops_and_opcheck():
    x = torch.randn(5, 64)
    w = torch.randn(12, 64)
    q, s = torch.ops.a4w4.quantize(x, "rceil")
    wq, ws = torch.ops.a4w4.quantize(w, "rceil")
    bias = torch.randn(12)
    y = torch.ops.a4w4.gemm(q, s, wq, ws, bias, None, 1.0, 0.0, torch.float32, 0, None, 0, 0)
    ref = a4w4.gemm(q.numpy(), s.numpy(), wq.numpy(), ws.numpy(), bias=bias.numpy())
    assert np.array_equal(y.numpy(), ref)
    torch.library.opcheck(torch.ops.a4w4.quantize.default, (x, "rceil"))
    torch.library.opcheck(
        torch.ops.a4w4.gemm.default,
        (q, s, wq, ws, bias, None, 1.0, 0.0, torch.bfloat16, 0, None, 0, 0),
    )
    torch.library.opcheck(
        torch.ops.a4w4.gemm.default,
        (q, s, wq, ws, bias, None, 1.0, 0.0, torch.bfloat16, 0, None, 0, 0, "fast_accum"),
    )


def test_mxfp4_linear_matches_functional_api():
    torch.manual_seed(0)
    lin = torch.nn.Linear(128, 48)
    m = at.MXFP4Linear.from_linear(lin)
    x = torch.randn(2, 3, 128)
    y = m(x)
    assert y.shape == (2, 3, 48) and y.dtype == torch.float32
    q, s = a4w4.quantize(x.reshape(6, 128))
    wq, ws = a4w4.quantize(lin.weight.detach())
    ref = a4w4.gemm(q, s, wq, ws, bias=lin.bias.detach())
    assert torch.equal(y.reshape(6, 48), ref)
    # close to the float layer (MXFP4 error only)
    rel = (y - lin(x)).norm() / lin(x).norm()
    assert rel < 0.25
    # bf16 activations give bf16 out; prepared weights give the same result
    mp = at.MXFP4Linear.from_linear(lin, prepare=True)
    assert mp.weight_prepared is not None
    assert torch.equal(mp(x), y)
    assert m(x.bfloat16()).dtype == torch.bfloat16
    with pytest.raises(a4w4.KNotMultipleOf32Error):
        at.MXFP4Linear(100, 8)
    # Fast accumulation: the CPU computes exactly in either mode; an unknown mode is refused.
    mf = at.MXFP4Linear.from_linear(lin, math_mode="fast_accum")
    assert torch.equal(mf(x), y) and "math_mode='fast_accum'" in repr(mf)
    with pytest.raises(a4w4.InvalidArgumentError):
        at.MXFP4Linear(128, 8, math_mode="fast")
    sd = m.state_dict()
    assert {"weight_fp4", "weight_scale", "bias"} <= set(sd)
    # A constant weight (a4w4.gemm's b_constant) changes no result; loading a state dict keeps it.
    mc = at.MXFP4Linear.from_linear(lin, constant_weight=True)
    assert torch.equal(mc(x), y) and "constant_weight=True" in repr(mc)
    mc.load_state_dict(mp.state_dict(), strict=False)
    assert torch.equal(mc(x), y)


def test_torch_compile_fullgraph_cpu():
    torch.manual_seed(1)
    m = at.MXFP4Linear(256, 64, bias=True)
    x = torch.randn(4, 256)
    eager = m(x)
    compiled = torch.compile(m, fullgraph=True)
    assert torch.equal(compiled(x), eager)
    x2 = torch.randn(4, 256)
    assert torch.equal(compiled(x2), m(x2))
