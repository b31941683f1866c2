"""Whether PyTorch (and a CUDA device through it) is present, and the pytest markers that skip on
their absence; shared by the twins' tests."""
import pytest

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
    HAVE_CUDA = torch.cuda.is_available()
except ImportError:
    HAVE_TORCH = HAVE_CUDA = False
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed here")
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device (or no PyTorch) here")
