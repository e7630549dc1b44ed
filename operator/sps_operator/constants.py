"""Names shared by every part: the API group, the image, labels and field managers."""

from __future__ import annotations

from sps_operator import __version__

API_GROUP = "sps.dev"
API_VERSION = "v1alpha1"
KIND = "SpsProfile"
PLURAL = "spsprofiles"

# The one image that runs the operator, the profiler and (for demos) the simulator.
IMAGE_REPOSITORY = "ghcr.io/sps-dev/sps-operator"
IMAGE = f"{IMAGE_REPOSITORY}:{__version__}"

# Node label naming the GPU product, as NVIDIA GPU feature discovery sets it.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"

FIELD_MANAGER = "sps-operator"
LABEL_PREFIX = "sps.dev"
