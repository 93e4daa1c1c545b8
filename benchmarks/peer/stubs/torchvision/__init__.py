"""Import-only torchvision stand-in (see _standin.py). Not the real package."""
from torchvision._standin import __version__, module_getattr

from torchvision import io, transforms  # noqa: E402,F401

__getattr__ = module_getattr("torchvision")
