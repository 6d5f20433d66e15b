"""Building blocks of the GLM-5.x decoder (one concept per file)."""
