"""sps-sim: a simulated SGLang DSpark server in profiling mode with a ground-truth cost model.

Modules: ``costmodel`` (presets, noise), ``graphs`` (capture lists, tiers), ``engine`` (server
state, pure), ``settings`` (command line + environment), ``protocol`` (request parsing and
error bodies), ``http_server`` (aiohttp routes), ``cli`` (``sps-sim``), ``truth`` (ground-truth
grid), ``testing`` (``running_sim`` for tests).
"""
