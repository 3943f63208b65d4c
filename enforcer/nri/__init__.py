"""The NRI adapter: the enforcer as a plugin of the runtime's Node Resource Interface.

``frames`` and ``connection``: the multiplexer and ttrpc, written by hand (no maintained Python
library speaks them); ``session``: registration and reconnection; the adapter maps NRI's
events to the same engine the CRI relay drives.
"""
