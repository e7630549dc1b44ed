"""sps-sim: a simulated SGLang DSpark server in profiling mode with a ground-truth cost model.

Modules: ``costmodel`` (presets, noise), ``engine`` (server state, pure), ``settings`` (command
line + environment), ``flavors`` (the SGLang builds it plays), ``capture_derived``,
``tableload`` (the SPS table it serves with), ``protocol`` (request parsing and error bodies),
``http_server`` (the routes), ``http_wire`` (HTTP/1.1 on asyncio streams), ``group``
(multi-node ranks), ``cli`` (``sps-sim``), ``truth`` (ground-truth grid), ``testing``
(``running_sim`` for tests).
"""
