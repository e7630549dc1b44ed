"""The two SPS table formats SGLang loads, their fits and fit quality (pure, no I/O)."""
