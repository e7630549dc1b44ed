"""`kubectl sps`: look at profiles and tables from the command line."""
