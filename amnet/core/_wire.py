"""The AM header on the wire: a fixed part and up to 16 little-endian int64 arguments.

``flags(u8) nargs(u8) handler(u16) src(u32) dst(u32) offset(u64) args(i64 * nargs)``

``flags`` holds the category (0 Short, 1 Medium, 2 Long), whether it is a reply, and whether
``handler`` indexes the system table (put/get/atomics/barrier/rpc) instead of the user's.
Whether a payload follows is the conduit's business (a second frame).
"""

from __future__ import annotations

import struct

MAX_ARGS = 16
SHORT, MEDIUM, LONG = 0, 1, 2
CATEGORY_MASK = 0x3
REPLY = 0x4
SYSTEM = 0x8
KNOWN_FLAGS = CATEGORY_MASK | REPLY | SYSTEM
CATEGORY_NAMES = ("short", "medium", "long")

FIXED = struct.Struct("<BBHIIQ")
FIXED_SIZE = FIXED.size  # 20
#: ``HEADERS[n]`` packs/unpacks a whole header with ``n`` arguments.
HEADERS = [struct.Struct("<BBHIIQ" + "q" * n) for n in range(MAX_ARGS + 1)]
ARGS = [struct.Struct("<" + "q" * n) for n in range(MAX_ARGS + 1)]
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: How a destination process is reached (``Engine.route``): in-line in this process, through
#: the node's shared memory, or through the conduit (``Port.through_network`` reads it too).
INLINE, PSHM, NET = 0, 1, 2
