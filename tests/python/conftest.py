"""pytest configuration for the Python package's tests (tests/python).

Markers: `cuda` tests need torch with a CUDA device (scripts/device-python.sh runs them on the GPU
machine); `torch` tests need PyTorch (CPU is enough). Both skip cleanly where that is missing.
"""

import importlib.util

import pytest


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _cuda_ready() -> bool:
    if not _has("torch"):
        return False
    import a4w4
    import torch

    return torch.cuda.is_available() and a4w4.backends()["cuda"].available


def pytest_collection_modifyitems(config, items):
    cuda_ok = None
    for item in items:
        if "cuda" in item.keywords:
            if cuda_ok is None:
                cuda_ok = _cuda_ready()
            if not cuda_ok:
                item.add_marker(
                    pytest.mark.skip(
                        reason="needs torch with a CUDA device and a4w4's CUDA backend"
                    )
                )
        if "torch" in item.keywords and not _has("torch"):
            item.add_marker(pytest.mark.skip(reason="needs PyTorch"))
