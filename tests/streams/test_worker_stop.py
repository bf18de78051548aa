"""A stop that comes while the worker imports and warms up (before Faust takes the signals over) is not lost.

Python only prints a KeyboardInterrupt raised inside a callback it runs for the interpreter (the import
system's module-lock weakref callback during Faust's imports): a worker whose SIGINT landed there ran on,
and the stop test killed it after 60 s (ci, ``test_command_stops_within_bound[worker-SIGINT]``)."""

from __future__ import annotations

import gc
import os
import signal
import weakref

import pytest

from streams.runtime.worker import _interrupt_and_remember


# the callback's KeyboardInterrupt is what Python reports and drops: the case under test, expected here
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigint_swallowed_inside_a_weakref_callback_is_still_seen():
    old_int, old_term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        stopped = _interrupt_and_remember()
        assert not stopped()

        class Held:
            pass

        def callback(_ref: object) -> None:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100_000):  # the handler runs here, inside the callback: Python prints its error
                pass

        held = Held()
        ref = weakref.ref(held, callback)
        try:
            del held
            gc.collect()
            for _ in range(100_000):
                pass
        except KeyboardInterrupt:  # had the handler run outside the callback, it would surface here
            pass
        assert ref() is None
        assert stopped()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
