# timm_zoo_models.py — owns the timm model zoo used by tests and benchmarks: models built from timm's configs (random weights, pretrained=False, no downloads) and example inputs per model.
"""``MODELS[name]()`` returns ``(model, make_inputs)``; ``make_inputs(seed)`` gives the forward's keyword
arguments (``{"x": images}``). The architectures are timm's own; only the image is small (2 x 3 x 64 x 64) so
a compile takes well under a second on a CPU: ResNet and ConvNeXt take any size, and the ViT is built with
``img_size=64`` (same depth, width and heads as ``vit_tiny_patch16_224``; 16 patches instead of 196).

Import ``vision_shim`` before this (tests/py/conftest.py does): timm imports torchvision."""
import torch

IMG = 64


def _images(seed, batch=2, size=IMG):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(batch, 3, size, size, generator=g)}


def _create(name, **kwargs):
    import timm
    return timm.create_model(name, pretrained=False, **kwargs)


def resnet18():
    return _create("resnet18"), _images


def vit_tiny_patch16_224():
    return _create("vit_tiny_patch16_224", img_size=IMG), _images


def convnext_atto():
    return _create("convnext_atto"), _images


MODELS = {"resnet18": resnet18, "vit_tiny_patch16_224": vit_tiny_patch16_224, "convnext_atto": convnext_atto}
