"""LakeSync Platform: a Python data-sync platform speaking LakeSync protocol v1."""
