"""The components of a GLM-5.3-Flash deployment, one module each (see README)."""
