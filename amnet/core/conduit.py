"""The conduit interface under its first name: it lives in :mod:`amnet.conduits` (the conduits'
own package since the house was put in order); conduits written against
``amnet.core.conduit`` keep working through these names."""

from ..conduits import CONDUITS as CONDUITS
from ..conduits import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from ..conduits import MAX_HEADER as MAX_HEADER
from ..conduits import Conduit as Conduit
from ..conduits import ConduitStatistics as ConduitStatistics
from ..conduits import get_conduit as get_conduit
from ..conduits import load_plugins as load_plugins
from ..conduits import register_conduit as register_conduit

__all__ = ["CONDUITS", "MAX_HEADER", "Conduit", "ConduitStatistics", "get_conduit",
           "register_conduit"]
