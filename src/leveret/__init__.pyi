# Types of the names leveret/__init__.py loads lazily (SPEC 1's lazy-loading stub).
from leveret.embedded import Broker as Broker
from leveret.embedded import serve as serve

__version__: str
__all__ = ["Broker", "__version__", "serve"]
