"""Controllers: cpuset (read back), RDT (resctrl) and block I/O (cgroups), behind one interface.

`base` is the interface the engine calls at each point of a container's life; `registry` lists
the controllers in one place. Each has a pure core (configuration + hardware -> what to write)
and a thin edge that writes it.
Kept free of heavy imports: the kubelet emulator imports `enforcer.controllers.cgroups`.
"""
