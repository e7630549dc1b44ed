"""`kubectl sps`: show, plot, diff and export SPS tables; request and explain profiling runs."""
