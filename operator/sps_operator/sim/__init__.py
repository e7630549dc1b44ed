"""`sps-sim`: an HTTP stand-in for an SGLang DSpark server in profiling mode."""
