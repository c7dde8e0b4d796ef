"""Reference counts and memory over many calls: nothing kept, nothing leaked."""

import gc
import sys

import a4w4
import numpy as np


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_no_references_kept_or_leaked_over_10k_calls():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    b, b_s = a4w4.quantize(rng.standard_normal((8, 64)).astype(np.float32))
    bias = np.zeros(8, np.float32)
    before = [sys.getrefcount(o) for o in (x, b, b_s, bias)]
    ctx = a4w4.Context(num_threads=1)

    def step():
        q, s = ctx.quantize(x)
        d = ctx.gemm(q, s, b, b_s, bias=bias)
        ctx.dequantize(q, s)
        try:
            ctx.gemm(q, s, b[:, :16], b_s)
        except a4w4.ShapeMismatchError:
            pass
        return d

    for _ in range(500):  # warm up allocator pools
        step()
    gc.collect()
    rss0 = rss_kib()
    for _ in range(10_000):
        d = step()
    gc.collect()
    grown = rss_kib() - rss0
    assert [sys.getrefcount(o) for o in (x, b, b_s, bias)] == before
    assert sys.getrefcount(d) == 2  # only `d` (and getrefcount's argument)
    assert grown < 8 * 1024, f"RSS grew by {grown} KiB over 10^4 iterations"


def test_outputs_outlive_the_context_and_dlpack_buffers_are_freed():
    x = np.ones((2, 32), np.float32)
    with a4w4.Context() as ctx:
        q, s = ctx.quantize(x)
    np.testing.assert_array_equal(a4w4.dequantize(q, s), x)

    class Producer:  # outputs for it come from a4w4's own allocator
        shape = x.shape

        def __dlpack__(self, **kw):
            return x.__dlpack__(**kw)

        def __dlpack_device__(self):
            return x.__dlpack_device__()

    gc.collect()
    rss0 = rss_kib()
    big = np.zeros((256, 4096), np.float32)

    class Big(Producer):
        shape = big.shape

        def __dlpack__(self, **kw):
            return big.__dlpack__(**kw)

    for _ in range(200):  # 200 x (512 KiB + 32 KiB) would be ~100 MiB if kept
        q, s = a4w4.quantize(Big())
        del q, s
    gc.collect()
    assert rss_kib() - rss0 < 32 * 1024


def test_concurrent_calls_from_threads():
    """Calls release the GIL and share one context: results match the single-threaded ones."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((16, 256)).astype(np.float32) for _ in range(8)]
    b, b_s = a4w4.quantize(rng.standard_normal((32, 256)).astype(np.float32))
    ctx = a4w4.Context(num_threads=1)

    def run(x):
        q, s = ctx.quantize(x)
        return ctx.gemm(q, s, b, b_s)

    expected = [run(x) for x in xs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(5):
            for got, want in zip(pool.map(run, xs), expected):
                np.testing.assert_array_equal(got, want)
