"""What an SGLang server container runs, read as the kubelet would start it (pure): its
environment and `$(VAR)` expansion (`podenv`), its command line and what the step cost
depends on (`serverconfig`, `serverread`), what changed between two servers
(`serverchanges`), and the frozen version-1 fingerprint (`fingerprint_v1`).

The bottom floor: imports nothing else of the controller."""
