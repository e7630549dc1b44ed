"""Stand-in ``sglang`` package: only ``python -m sglang.launch_server`` (runs sps-sim).

Not installed as a top-level package; put ``.../sps_sim/sglang_shim`` on PYTHONPATH
so an SGLang container command line starts the simulator instead.
"""
