"""Development tools run from a checkout (``python -m tools.NAME``), never shipped in the wheel:
the generators of the committed protobuf modules (``make proto``)."""
