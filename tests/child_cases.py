"""Functions for tests/test_child.py, importable by name in a fresh interpreter (no torch)."""

from __future__ import annotations

import os
import sys
import threading
import time


def add(a, b, *, scale=1):
    return (a + b) * scale


def interpreter():
    return os.getpid(), "torch" in sys.modules


def divide_by_zero():
    return 1 / 0


class Unpicklable(Exception):
    def __init__(self):
        super().__init__("holds a lock")
        self.lock = threading.Lock()


def raise_unpicklable():
    raise Unpicklable()


def return_unpicklable():
    return threading.Lock()


def die():
    os._exit(3)


def sleep(seconds):
    time.sleep(seconds)
