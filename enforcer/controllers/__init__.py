"""Controllers that apply class decisions to the kernel: RDT (resctrl) and block I/O (cgroups).

Each has a pure core (configuration + hardware -> what to write) and a thin edge that writes it.
Kept free of heavy imports: the kubelet emulator imports `enforcer.controllers.cgroups`.
"""
