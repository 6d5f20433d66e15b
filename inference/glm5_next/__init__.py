"""GLM-5.3-Flash (`glm5_next`): the second model family (KDA + MLA/DSA hybrid, mHC streams)."""
