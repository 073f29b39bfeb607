"""Running the engine on a thread with a deep stack.

libcst's native parser and its Python visitors recurse once per nesting level of the code. On the
default 8 MiB stack and recursion limit of 1000, a 400-term sum or a few hundred nested calls end in
a RecursionError (a file that cannot be checked), and a deeper nest overflows the parser's stack:
the whole process dies with SIGSEGV, taking the run with it. On its own thread with a large stack
(untouched pages cost no memory) and a raised recursion limit, such files are checked like others.

The cyclic garbage collector is paused while a file is analysed: a parse makes hundreds of
thousands of objects that live until the analysis ends, and the collector's passes over them cost
a fifth of the analysis while finding nothing to free. The cycles a file's analysis leaves behind
are collected after it, by the collector's next pass.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import threading

STACK_BYTES = 512 << 20
RECURSION_LIMIT = 20_000

_state = threading.local()
_lock = threading.Lock()


def on_deep_stack(function):
    """Decorate ``function`` to run on a deep-stack thread (directly when already on one)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if getattr(_state, "deep", False):
            return function(*args, **kwargs)
        outcome: dict = {}

        def target() -> None:
            _state.deep = True
            try:
                outcome["value"] = function(*args, **kwargs)
            except BaseException as error:  # handed to the caller's thread
                outcome["error"] = error

        # The recursion limit and the thread stack size are process-wide settings.
        with _lock, collector_paused():
            previous_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(previous_limit, RECURSION_LIMIT))
            try:
                # daemon: a Ctrl-C in the caller must not wait for the analysis to finish
                thread = threading.Thread(target=target, name="pmap-migrate-engine", daemon=True)
                try:
                    previous_size = threading.stack_size(STACK_BYTES)
                except (ValueError, RuntimeError):  # a platform that cannot size thread stacks
                    thread = None
                else:
                    try:
                        thread.start()
                    except RuntimeError:  # no memory for such a stack
                        thread = None
                    finally:
                        threading.stack_size(previous_size)
                if thread is not None:
                    thread.join()
            finally:
                sys.setrecursionlimit(previous_limit)
        if thread is None:
            return function(*args, **kwargs)
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    return wrapper


@contextlib.contextmanager
def collector_paused():
    """The cyclic garbage collector paused within the block (an analysis, and the `ast` step before
    it: a parse makes tens of thousands of objects per file that live until the file is done)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
