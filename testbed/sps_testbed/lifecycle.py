"""The shape the supervisor and the node runners share: start, run until SIGTERM/SIGINT
(or a failure), and always stop."""

from __future__ import annotations

import signal
from typing import Protocol


class Service(Protocol):
    stopping: bool

    def start(self) -> None: ...

    def run(self) -> int: ...

    def failed(self, err: Exception) -> None: ...

    def stop(self) -> None: ...


def run_until_signalled(service: Service) -> int:
    """The process's exit code: 0 after a signal, 1 when it failed to start or to run."""

    def on_term(signum: int, frame: object) -> None:
        service.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    code = 1
    try:
        service.start()
        code = service.run()
    except Exception as err:
        service.failed(err)
    finally:
        service.stop()
    return code
