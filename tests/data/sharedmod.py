"""Imported by the rank-threads of a test job: imported modules are shared by a process."""

import threading

items: list[int] = []
lock = threading.Lock()
