"""JAX arrays (CPU): accepted through DLPack, results returned as JAX arrays."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import a4w4  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def test_jax_in_jax_out():
    x = np.random.default_rng(0).standard_normal((8, 128)).astype(np.float32)
    jq, js = a4w4.quantize(jnp.asarray(x))
    assert isinstance(jq, jax.Array) and jq.dtype == jnp.uint8 and jq.shape == (8, 64)
    q, s = a4w4.quantize(x)
    assert np.array_equal(np.asarray(jq), q) and np.array_equal(np.asarray(js), s)
    jd = a4w4.gemm(jq, js, jq, js, out_dtype=jnp.bfloat16)
    assert isinstance(jd, jax.Array) and jd.dtype == jnp.bfloat16
    d = a4w4.gemm(q, s, q, s, out_dtype="bfloat16")
    assert np.array_equal(np.asarray(jd).view(np.uint16), d.view(np.uint16))
    jy = a4w4.dequantize(jq, js, out_dtype=jnp.bfloat16)
    assert jy.shape == (8, 128) and jy.dtype == jnp.bfloat16
