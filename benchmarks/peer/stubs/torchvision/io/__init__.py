from torchvision._standin import module_getattr

__getattr__ = module_getattr("torchvision.io")
