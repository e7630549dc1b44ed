"""`sps-profiler`: measures a DSpark server over HTTP and fits its SPS table."""
