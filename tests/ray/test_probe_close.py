"""A shutdown never waits on a GCS that does not answer: closing the gateway kills its
probe child at once, and the request still waiting on it fails (before, ``close`` took
the lock that request held, and ``argus up`` hung in its shutdown for Ray's timeout)."""

from __future__ import annotations

import socket
import threading
import time

from argus.rayjobs.gateway import RayGateway
from argus.rayjobs.probe import ProbeFailed


def test_closing_the_gateway_ends_a_request_waiting_on_a_silent_gcs() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections, never answers
    gateway = RayGateway("http://127.0.0.1:9", f"127.0.0.1:{silent.getsockname()[1]}")
    outcome: list[BaseException | object] = []

    def ask() -> None:
        try:
            outcome.append(gateway.capacity())
        except BaseException as exc:  # noqa: BLE001 - what ended the request is the point
            outcome.append(exc)

    asking = threading.Thread(target=ask, daemon=True)
    try:
        asking.start()
        for _ in range(300):  # the probe child is up and the request waits on it
            probe = gateway._probe
            if probe is not None and probe._child is not None and probe._lock.locked():
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the request never reached the probe")
        started = time.monotonic()
        gateway.close()
        closed_in = time.monotonic() - started
        asking.join(10)
        assert not asking.is_alive() and closed_in < 5.0, closed_in
        assert outcome and isinstance(outcome[0], Exception), outcome
    finally:
        gateway.close()
        silent.close()
