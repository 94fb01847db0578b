"""The AM header on the wire: a fixed part and up to 16 little-endian int64 arguments.

``flags(u8) nargs(u8) handler(u16) src(u32) dst(u32) offset(u64) args(i64 * nargs)``

``flags`` holds the category (0 Short, 1 Medium, 2 Long), whether it is a reply, and whether
``handler`` indexes the system table (put/get/atomics/barrier/rpc) instead of the user's.
Whether a payload follows is the conduit's business (a second frame).
"""

from __future__ import annotations

import struct

# The numbers are the C hot path's (amnet/core/_hot.h, the one place they are written).
from ._hot import CATEGORY_MASK as CATEGORY_MASK
from ._hot import FIXED_SIZE as FIXED_SIZE
from ._hot import INLINE as INLINE
from ._hot import KNOWN_FLAGS as KNOWN_FLAGS
from ._hot import LONG as LONG
from ._hot import MAX_ARGS as MAX_ARGS
from ._hot import MEDIUM as MEDIUM
from ._hot import NET as NET
from ._hot import PSHM as PSHM
from ._hot import REPLY as REPLY
from ._hot import SHORT as SHORT
from ._hot import SYSTEM as SYSTEM

CATEGORY_NAMES = ("short", "medium", "long")

FIXED = struct.Struct("<BBHIIQ")
if FIXED.size != FIXED_SIZE:  # the format above is the one C packs and parses by hand
    raise ImportError(f"amnet.core._hot was built for {FIXED_SIZE}-byte AM headers, not "
                      f"{FIXED.size}: rebuild it (pip install -e .)")
#: ``HEADERS[n]`` packs/unpacks a whole header with ``n`` arguments.
HEADERS = [struct.Struct("<BBHIIQ" + "q" * n) for n in range(MAX_ARGS + 1)]
ARGS = [struct.Struct("<" + "q" * n) for n in range(MAX_ARGS + 1)]
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# How a destination process is reached (``Engine.route``): INLINE in this process, PSHM
# through the node's shared memory, NET through the conduit (``Port.through_network`` too).
