"""Names shared by everything that creates, finds or cleans up sandbox containers."""

from __future__ import annotations

import os

# The tag of the offline-built base image (`horizon sandbox build`); task images are built FROM it.
BASE_IMAGE = "horizon/base:bookworm"

# Every sandbox container carries LABEL_KEY=LABEL_VALUE, so `horizon sandbox gc` can find leftovers.
LABEL_KEY = "dev.horizon.sandbox"
LABEL_VALUE = "1"

# Identifies the run (test session, eval run) that created a container; from $HORIZON_RUN_ID.
RUN_LABEL_KEY = "dev.horizon.run"

# What a labelled object is, besides sandboxes themselves: "egress" (an allowlist sandbox's proxy
# container and internal network).
ROLE_LABEL_KEY = "dev.horizon.role"

# Image label holding the hash of the base-image recipe: an unchanged recipe is reused.
RECIPE_LABEL_KEY = "dev.horizon.recipe"

# Image label on task images built by `sandbox.images.build_image`.
TASK_IMAGE_LABEL_KEY = "dev.horizon.task-image"


def run_id() -> str:
    """The run id stamped on new containers; read at call time so tests can set it late."""
    return os.environ.get("HORIZON_RUN_ID", "default")


def cache_dir() -> str:
    """Where debootstrap tarballs live between builds ($HORIZON_CACHE_DIR, else ~/.cache/horizon)."""
    explicit = os.environ.get("HORIZON_CACHE_DIR")
    if explicit:
        return explicit
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "horizon")
