from torchvision._standin import InterpolationMode, module_getattr  # noqa: F401

__getattr__ = module_getattr("torchvision.transforms.v2.functional")
