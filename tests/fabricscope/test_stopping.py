"""The shared stop helpers: SIGTERM stops `up` and `demo` the way Ctrl-C does, and the old handlers come back."""

from __future__ import annotations

import os
import signal

import pytest

from fabricscope.stopping import interrupt_on_terminate, stop_requested


def test_sigterm_raises_keyboard_interrupt_then_handlers_are_restored():
    before_term = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell without job control starts `cmd &`
    try:
        restore = interrupt_on_terminate()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)  # give the handler a chance to run before leaving the block
        restore()
        assert signal.getsignal(signal.SIGTERM) == before_term
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_stop_requested_turns_true_on_sigterm_only():
    old = signal.getsignal(signal.SIGTERM)
    try:
        stopping = stop_requested()
        assert stopping() is False
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0)
        assert stopping() is True
    finally:
        signal.signal(signal.SIGTERM, old)
