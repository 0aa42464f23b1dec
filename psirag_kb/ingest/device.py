"""The torch device that runs the models: the configured one, or with "auto" the best found."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def pick_device(setting: str) -> tuple[str, str]:
    """(device, why): "auto" takes CUDA, else Apple's MPS, else the CPU; any other setting
    (cpu, cuda, cuda:1, mps...) is used as configured."""
    if setting != "auto":
        return setting, "configured"
    import torch  # already imported by the model that asks

    if torch.cuda.is_available():
        return "cuda", f"auto: CUDA found ({torch.cuda.get_device_name(0)})"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps", "auto: Apple MPS found"
    return "cpu", "auto: no CUDA or MPS found"


def device_of(embedder: object) -> tuple[str, str]:
    """(device, why) of an embedder, looking inside caches and wrappers; ("", "") when it
    does not say (a test's stand-in)."""
    for _ in range(4):
        if hasattr(embedder, "device_reason"):
            device = str(getattr(embedder, "device", ""))
            if device:
                return device, str(embedder.device_reason)
            config = getattr(embedder, "_config", None)
            return str(getattr(config, "device", "")), "chosen when the model loads"
        inner = getattr(embedder, "inner", None) or getattr(embedder, "_model", None)
        if inner is None:
            break
        embedder = inner
    return "", ""
