"""The SpsProfile API (pydantic models, the single source of truth for the CRD)."""
